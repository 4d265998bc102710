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
  (:require [xtdb.kv :as kv]
            [xtdb.rocksdb :as rocks]
            [xtdb.system :as sys])
  (:import [java.io Closeable]
           [org.rocksdb DBOptions WriteOptions]))

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

(defrecord SyncedKvStore [inner ^WriteOptions write-options]
  kv/KvStore
  (new-snapshot [_] (kv/new-snapshot inner))
  (store [_ kvs] (kv/store inner kvs))
  (fsync [_] (kv/fsync inner))
  (compact [_] (kv/compact inner))
  (count-keys [_] (kv/count-keys inner))
  (db-dir [_] (kv/db-dir inner))
  (kv-name [_] (kv/kv-name inner))

  Closeable
  (close [_]
    ;; The database is the `:kv-store` module's, which closes it; this view owns its options.
    (.close write-options)))

(defn ->synced-kv-store
  "A view of the RocksDB store `:kv-store` (a `selfctx.rocksdb/->durable-kv-store` whose writes
  are not synced) whose writes are: the tx-log's, when the tx-log and the document store share
  one RocksDB. Both views write to one write-ahead log, and a synced write makes every earlier
  write of that log durable with it, so the documents of a transaction, written before its
  tx-log entry (`xtdb.node`'s submit path), are on disk once that entry is: one fsync a commit
  instead of two. Reads are the store's. Closing the view closes only its options. See
  docs/decisions/0166-one-fsync-a-commit.md."
  {::sys/deps {:kv-store `->durable-kv-store}}
  [{:keys [kv-store]}]
  (let [write-options (doto (WriteOptions.) (.setSync true))]
    (->SyncedKvStore (assoc kv-store :write-options write-options) write-options)))
