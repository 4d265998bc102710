(ns selfctx.index
  "XTDB's index store, told to leave some attributes out of its attribute indices.

  XTDB indexes every top-level attribute of every document, so that Datalog can match on it. A
  string longer than 224 bytes cannot be indexed by its value: XTDB hashes it (SHA-1 over its
  serialised form) and keeps a second copy of the whole string in the index store, so that a query
  binding it can give it back. For the `content` of a file that is every source file twice over,
  for a query nobody asks: whether two objects hold the same text is what `content_hash` answers.

  The attributes left out are still in every document, in the document store and in every
  version the history keeps; `entity`, `pull`, history and `match` read documents from there. Only
  Datalog clauses on them (`[?e :content ?c]`) find nothing. The nodes' configs index only what
  the adapter's queries name (`:indexed`): a session's id lists, the chat of every snapshot and
  a tool call's arguments are not index entries either. See
  docs/decisions/0018-content-is-not-an-index-key.md and
  docs/decisions/0068-a-node-keeps-what-it-is-asked.md."
  (:require [clojure.spec.alpha :as s]
            [xtdb.db :as db]
            [xtdb.kv.index-store :as kv-index]
            [xtdb.status :as status]
            [xtdb.system :as sys])
  (:import [clojure.lang MapEntry]
           [java.io Closeable]))

(defn- strip-fn
  "What of a document the attribute indices see: only the attributes in `indexed` (and XTDB's
  own, `:crux.db/id`) when it is given, else all but those in `unindexed`; nil when nothing is
  left out."
  [indexed unindexed]
  (cond
    ;; XTDB's own attributes (`:crux.db/id` and the like) are qualified keywords: kept.
    (seq indexed) (let [keep (set indexed)]
                    (fn [doc]
                      (into {} (filter (fn [[k _]] (or (qualified-keyword? k) (keep k)))) doc)))
    (seq unindexed) #(reduce dissoc % unindexed)
    :else nil))

(defn- without
  "`docs` with each document cut by `strip` (`strip-fn`). `docs` holds (content hash, document)
  entries: a map for a transaction's documents, a vector when the node hands over the documents
  of several transactions at once to update its statistics (a hash may repeat there, so it stays
  a vector)."
  [strip docs]
  (if (nil? strip)
    docs
    (let [cut (map (fn [[content-hash doc]] (MapEntry/create content-hash (strip doc))))]
      (if (map? docs)
        (into {} cut docs)
        (into [] cut docs)))))

(defrecord IndexStoreTx [tx strip]
  db/IndexStoreTx
  (index-tx [_ t] (db/index-tx tx t))
  (index-docs [_ docs] (db/index-docs tx (without strip docs)))
  (unindex-eids [_ base-snapshot eids] (db/unindex-eids tx base-snapshot eids))
  (index-entity-txs [_ entity-txs] (db/index-entity-txs tx entity-txs))
  (commit-index-tx [_] (db/commit-index-tx tx))
  ;; XTDB indexes a failed transaction's documents too, to find them again on eviction.
  (abort-index-tx [_ t docs] (db/abort-index-tx tx t (without strip docs)))

  db/IndexSnapshotFactory
  (open-index-snapshot [_] (db/open-index-snapshot tx)))

(defrecord IndexStore [store strip]
  db/IndexStore
  (store-index-meta [_ k v] (db/store-index-meta store k v))
  (tx-failed? [_ tx-id] (db/tx-failed? store tx-id))
  (begin-index-tx [_] (->IndexStoreTx (db/begin-index-tx store) strip))
  (index-stats [_ docs] (db/index-stats store (without strip docs)))

  db/LatestCompletedTx
  (latest-completed-tx [_] (db/latest-completed-tx store))

  db/IndexMeta
  (-read-index-meta [_ k not-found] (db/-read-index-meta store k not-found))

  db/IndexSnapshotFactory
  (open-index-snapshot [_] (db/open-index-snapshot store))

  status/Status
  (status-map [_] (status/status-map store))

  Closeable
  (close [_] (.close ^Closeable store)))

(defn ->index-store
  "`xtdb.kv.index-store/->kv-index-store`, with only the attributes in `:indexed` (keywords) in
  the attribute indices, or all but those in `:unindexed`. Takes the same dependencies and
  arguments, and `:indexed` and `:unindexed`."
  {::sys/deps (::sys/deps (meta #'kv-index/->kv-index-store))
   ::sys/args (assoc (::sys/args (meta #'kv-index/->kv-index-store))
                     :unindexed {:doc "Attributes left out of the attribute indices"
                                 :default #{}
                                 :spec (s/coll-of keyword? :kind set?)}
                     :indexed {:doc "The only attributes in the attribute indices (with :xt/id);
                                     empty: all but the unindexed ones"
                               :default #{}
                               :spec (s/coll-of keyword? :kind set?)})}
  [{:keys [indexed unindexed] :as opts}]
  (->IndexStore (kv-index/->kv-index-store (dissoc opts :unindexed :indexed))
                (strip-fn indexed unindexed)))
