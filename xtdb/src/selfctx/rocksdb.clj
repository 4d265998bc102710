(ns selfctx.rocksdb
  "The RocksDB store under a node's query indices, without a write-ahead log.

  The index store is derived data: XTDB rebuilds it from the tx-log and the document store, and
  it records the last transaction it indexed in the same write batch as that transaction's
  entries. Without a write-ahead log, a crash loses what was still in memory; the store reopens
  at its last flush and the node indexes the transactions after that point again. Every write is
  cheaper: indexing 1,790 source files wrote about 50 MB of index log (every long value, each
  file's content among them, is copied into the index's hash cache), and without a log the
  entries reach the disk only when their memtable is flushed.

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

(defn ->durable-kv-store
  "`xtdb.rocksdb/->kv-store` for the document store, the bulk of the record: every write fsynced
  as before, and its memtables flushed into compressed tables once they hold `:write-buffer-mb`
  together, so that what is on disk is mostly compressed tables, not an
  uncompressed write-ahead log that a small session never outgrows (RocksDB's default memtable is
  64 MB per column family). Takes the same dependencies and arguments, less `:db-options`. See
  docs/decisions/0068-a-node-keeps-what-it-is-asked.md."
  {::sys/deps (::sys/deps (meta #'rocks/->kv-store))
   ::sys/args (assoc (dissoc (::sys/args (meta #'rocks/->kv-store)) :db-options)
                     :write-buffer-mb {:doc "Memtables of all column families, in MB, before a flush"
                                       :default 8
                                       :spec ::sys/pos-int})}
  [{:keys [write-buffer-mb] :as opts}]
  (let [background-jobs (max 2 (dec (.availableProcessors (Runtime/getRuntime))))]
    (rocks/->kv-store (assoc (dissoc opts :write-buffer-mb)
                             :db-options (doto (DBOptions.)
                                           (.setDbWriteBufferSize
                                            (* 1024 1024 (long write-buffer-mb)))
                                           ;; What xtdb.rocksdb sets when it makes the options.
                                           (.setMaxBackgroundJobs background-jobs))))))
