"""What the service tells a monitoring system: the Prometheus collector (read from the database at scrape
time) and the API's request timing. Served by api/routes/prometheus.py."""
