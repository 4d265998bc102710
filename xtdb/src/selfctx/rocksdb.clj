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

(defrecord UnsyncedView [kv ^WriteOptions write-options]
  ;; `kv` with this view's write options: the same RocksDB, its writes not synced.
  kv/KvStore
  (new-snapshot [_] (kv/new-snapshot kv))
  (store [_ kvs] (kv/store (assoc kv :write-options write-options) kvs))
  (fsync [_] (kv/fsync kv))
  (compact [_] (kv/compact kv))
  (count-keys [_] (kv/count-keys kv))
  (db-dir [_] (kv/db-dir kv))
  (kv-name [_] (kv/kv-name kv))

  Closeable
  ;; The RocksDB is the shared store's: closed by it, once, after every module that uses it.
  (close [_] (.close write-options)))

(defn ->unsynced-view
  "The RocksDB store `:kv-store` (an `xtdb.rocksdb` store with its write-ahead log on), its writes
  made without a sync of their own, for the document store of a node whose tx-log is the same
  RocksDB with every write synced. A synced write makes every write before it in the store's
  write-ahead log durable with it, and XTDB writes a transaction's documents before its log
  entry: the entry's sync covers them, one sync per commit instead of two, and no log entry is
  ever durable without its documents. See
  docs/decisions/0101-the-log-entry-syncs-its-documents.md."
  {::sys/deps {:kv-store `->durable-kv-store}}
  [{:keys [kv-store]}]
  (let [^WriteOptions shared (:write-options kv-store)]
    (when (or (nil? shared) (.disableWAL shared))
      (throw (IllegalArgumentException.
              "an unsynced view needs a RocksDB store that keeps its write-ahead log")))
    (->UnsyncedView kv-store (doto (WriteOptions.) (.setSync false) (.setDisableWAL false)))))
