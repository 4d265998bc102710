"""Ports: what the use cases need from the outside world, as abstract classes."""
