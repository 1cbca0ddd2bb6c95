"""REST routes, one small module per resource (all under /api), plus the dashboard's ui.py."""
