"""The throwaway PostgreSQL server the cluster tests run (``selfctx.adapters.xtdb.postgres``)."""

from selfctx.adapters.xtdb.postgres import LocalPostgres, find_bin_dir

__all__ = ["LocalPostgres", "find_bin_dir"]
