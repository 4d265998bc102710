"""mounts."""
