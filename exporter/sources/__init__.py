"""Sources every node has, whatever is switched on: each talks to one outside system (the kubelet, /proc) and knows no other."""
