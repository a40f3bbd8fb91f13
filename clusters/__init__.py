"""Where nodes come from (backends) and what runs on them (cluster kinds)."""
