(ns selfctx.documents
  "The document store of the RocksDB and in-memory nodes: XTDB's key-value document store behind
  the node's document cache, keeping in the cache what it writes.

  XTDB's `CachedDocumentStore` evicts every document it writes from the cache. The node then
  indexes the transaction a few milliseconds later and fetches those very documents: on the
  `xtdb-tx-docs-fetch` thread, each one read back from the store and thawed (nippy), on the path
  of every commit that awaits its indexing, and put in the cache then. This store writes them
  first, as XTDB's does, and puts them in the cache once they are written, so that the fetch
  finds them there. What the cache holds once a transaction is indexed is unchanged, and so is
  what any fetch returns: a document is its content hash's (XTDB hashes it before the write) and
  changes only when `evict` replaces it with a tombstone, which is written, and kept, the same
  way. See docs/decisions/0113-a-node-keeps-what-it-writes.md."
  (:require [xtdb.cache :as cache]
            [xtdb.codec :as c]
            [xtdb.db :as db]
            [xtdb.document-store :as ds]
            [xtdb.io :as xio]
            [xtdb.kv.document-store :as kv-docs]
            [xtdb.memory :as mem]
            [xtdb.system :as sys])
  (:import [clojure.lang MapEntry]
           [java.io Closeable]
           [java.util.concurrent.atomic AtomicLong]
           [xtdb.cache ICache]))

(set! *warn-on-reflection* true)

(def ^AtomicLong read-back
  "Documents this JVM's document stores read from their key-value store, the cache having none
  of them: what `/_xtdb/status` reports as \"selfctxDocumentsRead\" (one node per JVM)."
  (AtomicLong.))

(def ^AtomicLong written
  "Documents this JVM's document stores wrote to their key-value store: what `/_xtdb/status`
  reports as \"selfctxDocumentsWritten\" (one node per JVM). A document the cache holds already
  is not written again, so a transaction's `match` of the version the previous one put, and a
  put of content stored before, write nothing (decision 0160)."
  (AtomicLong.))

(defrecord CountedDocumentStore [inner]
  db/DocumentStore
  (fetch-docs [_ ids]
    (let [ids (vec ids)]
      (.addAndGet read-back (count ids))
      (db/fetch-docs inner ids)))
  (submit-docs [_ id-and-docs]
    (.addAndGet written (count id-and-docs))
    (db/submit-docs inner id-and-docs))

  Closeable
  (close [_]
    (xio/try-close inner)))

(defn- cached-otherwise?
  "Whether the cache holds another value than `doc` under `k` (only an evicted document's
  tombstone, or a document put again after its eviction, differs from what it replaces)."
  [^ICache cache k doc]
  (let [v (.valAt cache k ::absent)]
    (not (or (identical? v ::absent) (identical? v doc) (= v doc)))))

(defn- cached-as?
  "Whether the cache holds `doc` itself under `k`: then the store holds it too (the cache keeps
  only what was written or read back, and an evicted document's tombstone differs from it), and
  writing it again would write the same bytes under the same key (decision 0160)."
  [^ICache cache k doc]
  (let [v (.valAt cache k ::absent)]
    (and (not (identical? v ::absent)) (or (identical? v doc) (= v doc)))))

(defrecord KeptDocumentStore [cache cached inner]
  db/DocumentStore
  (fetch-docs [_ ids]
    (db/fetch-docs cached ids))

  (submit-docs [_ id-and-docs]
    (let [entries (into []
                        (keep (fn [[id doc]]
                                (let [k (c/->id-buffer id)]
                                  (when-not (cached-as? cache k doc) [k id doc]))))
                        id-and-docs)]
      ;; Nothing of another version stays cached should the write fail (XTDB's order). A
      ;; document cached as it is written stays: a fetch meanwhile finds it.
      (doseq [[k _ doc] entries
              :when (cached-otherwise? cache k doc)]
        (cache/evict cache k))
      (when (seq entries)
        (db/submit-docs inner (mapv (fn [[_ id doc]] (MapEntry/create id doc)) entries)))
      ;; Written: a fetch from now on reads these. One that ran between the eviction above and
      ;; the write may have cached what it read before, so that goes first.
      (doseq [[k _ doc] entries]
        (when (cached-otherwise? cache k doc)
          (cache/evict cache k))
        (cache/compute-if-absent cache k mem/copy-to-unpooled-buffer (fn [_] doc)))))

  Closeable
  (close [_]
    (xio/try-close inner)))

(defn ->document-store
  "XTDB module: `xtdb.kv.document-store/->document-store` (same dependencies and arguments) whose
  writes stay in the document cache."
  {::sys/deps {:kv-store 'xtdb.mem-kv/->kv-store
               :document-cache 'xtdb.cache/->cache}
   ::sys/args {:fsync? {:spec ::sys/boolean
                        :required? true
                        :default true}
               :counted? {:spec ::sys/boolean
                          :doc "Whether `read-back` and `written` count its documents (the
                               warm-up's scratch node's are not the node's, decision 0167)"
                          :default true}}}
  [{:keys [kv-store document-cache fsync? counted?]}]
  (let [store (kv-docs/->KvDocumentStore kv-store fsync?)
        inner (if counted? (->CountedDocumentStore store) store)]
    (->KeptDocumentStore document-cache (ds/->CachedDocumentStore document-cache inner) inner)))
