"""rankzero's HTTP surface and the owner of the database schema."""
