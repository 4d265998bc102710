"""filesystem."""
