(ns selfctx.cache
  "A least-recently-used cache bounded by the memory its values take, for a node's documents.

  XTDB's own document cache is bounded by a count of documents (131,072 by default), whatever
  their size. Our documents carry whole files and tool outputs, so that count is gigabytes: a
  node that indexes a large tree keeps every document it indexed until its heap is full, and
  from then on spends its time collecting garbage. This cache drops its least recently used
  documents once their estimated size passes `:max-bytes`. See
  docs/decisions/0017-one-value-per-log-entry-and-a-bounded-document-cache.md."
  (:require [xtdb.system :as sys])
  (:import [java.util Iterator LinkedHashMap Map$Entry]
           [clojure.lang MapEntry]
           [xtdb.cache ICache]))

(set! *warn-on-reflection* true)

(defn weight
  "Estimated bytes of `v` on the heap: characters of strings, elements of collections, and a
  fixed overhead per object. An estimate, not a measurement: it counts a character as one byte
  (Java's compact strings) and shares nothing."
  ^long [v]
  (cond
    (string? v) (+ 48 (.length ^String v))
    (map? v) (reduce-kv (fn [^long acc k x] (+ acc 32 (weight k) (weight x))) 64 v)
    (coll? v) (reduce (fn [^long acc x] (+ acc 8 (weight x))) 64 v)
    :else 16))

(deftype WeighedLru [^LinkedHashMap entries ^long max-bytes ^:unsynchronized-mutable ^long total]
  ICache
  (computeIfAbsent [this k stored-key-fn f]
    (let [v (.valAt this k ::absent)]
      (if-not (identical? v ::absent)
        v
        ;; The key copy and the value are made outside the lock, as XTDB's own caches do.
        (let [k (stored-key-fn k)
              v (f k)
              w (weight v)]
          (locking entries
            (if-let [^MapEntry cached (.get entries k)]
              (.val cached)
              (do
                (when (<= w max-bytes)
                  (.put entries k (MapEntry/create w v))
                  (set! total (+ total w))
                  (let [^Iterator eldest (.iterator (.entrySet entries))]
                    (while (> total max-bytes)
                      (let [^Map$Entry e (.next eldest)]
                        (set! total (- total (long (.key ^MapEntry (.getValue e)))))
                        (.remove eldest)))))
                v)))))))

  (evict [_ k]
    (locking entries
      (when-let [^MapEntry cached (.remove entries k)]
        (set! total (- total (long (.key cached)))))))

  (valAt [this k]
    (.valAt this k nil))

  (valAt [_ k default]
    (locking entries
      (if-let [^MapEntry cached (.get entries k)]
        (.val cached)
        default)))

  (count [_]
    (locking entries
      (.size entries)))

  (close [_]
    (locking entries
      (.clear entries)
      (set! total 0))))

(defn ->cache
  "XTDB module: `{:document-cache {:xtdb/module selfctx.cache/->cache :max-bytes N}}` in a document
  store's config."
  {::sys/args {:max-bytes {:doc "Estimated bytes of documents kept" :default (* 64 1024 1024)
                           :spec ::sys/pos-int}}}
  ^ICache [{:keys [max-bytes]}]
  ;; Access order: a read moves the entry to the young end.
  (->WeighedLru (LinkedHashMap. 16 0.75 true) max-bytes 0))
