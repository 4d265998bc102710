"""xtdb."""
