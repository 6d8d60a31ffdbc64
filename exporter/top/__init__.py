"""`top`: one row per container that holds a GPU, from Prometheus or from the exporters through the API server's pod proxy."""
