"""The application's use cases, one small class each; :mod:`selfctx.application.service` composes
them."""
