(ns selfctx.rocksdb
  "The RocksDB store under a node's query indices, without a write-ahead log.

  The index store is derived data: XTDB rebuilds it from the tx-log and the document store, and
  it records the last transaction it indexed in the same write batch as that transaction's
  entries. Without a write-ahead log, a crash loses what was still in memory; the store reopens
  at its last flush and the node indexes the transactions after that point again. Every write is
  cheaper: indexing writes about 50 MB of index entries per 1,790 files (each long value twice,
  once as a hash cache entry), and without a log they are written once, when flushed.

  What makes it safe is atomic flush: XTDB keeps its index entries in three column families, and
  they must be flushed together, or a crash could leave one family holding entries of
  transactions that another, with the last-indexed marker, does not. See
  docs/decisions/0016-index-store-without-wal.md."
  (:require [xtdb.rocksdb :as rocks]
            [xtdb.system :as sys])
  (:import [org.rocksdb DBOptions]))

(defn ->kv-store
  "`xtdb.rocksdb/->kv-store` with the write-ahead log off and every column family flushed
  atomically. Takes the same dependencies and arguments, less `:disable-wal?` and `:db-options`,
  which it sets."
  {::sys/deps (::sys/deps (meta #'rocks/->kv-store))
   ::sys/args (dissoc (::sys/args (meta #'rocks/->kv-store)) :disable-wal? :db-options)}
  [opts]
  (let [background-jobs (max 2 (dec (.availableProcessors (Runtime/getRuntime))))]
    (rocks/->kv-store (assoc opts
                             :disable-wal? true
                             :db-options (doto (DBOptions.)
                                           (.setAtomicFlush true)
                                           ;; What xtdb.rocksdb sets when it makes the options.
                                           (.setMaxBackgroundJobs background-jobs))))))
