"""The application's use cases, one small class each; :mod:`application.service` composes them."""
