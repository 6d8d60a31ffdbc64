"""Source: the Kubernetes API server: this node's pods (one watch), their workloads and labels, DRA devices."""
