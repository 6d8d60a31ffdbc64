"""Web: the HTTP server, its routes and limits, scrape answers and gzip, self metrics, TLS and basic auth."""
