(ns selfctx.versions
  "Which file versions the node's recent transactions wrote: what every client of the store reads
  before it assembles a context, to learn the versions other clients wrote of the files its
  sessions hold (a file is watched by one process per store; everyone else learns its new
  versions here). See docs/decisions/0066-one-watcher-per-file-and-store.md.

  A listener on the node's indexed transactions keeps, for its last `capacity` file versions,
  `[tx-id id object_hash]`. A query after a transaction older than what is kept says it cannot
  tell (`complete` false): the client then compares all its files at once. Every node of a
  cluster indexes every transaction, so each keeps the same feed of its own.

  The listener hears of a transaction on a thread of its own, after the node counts it as
  indexed: a client told its write is indexed may ask before the feed has it. So an answer
  waits (a bounded time) until the feed has seen every transaction the node had indexed when it
  was asked."
  (:require [xtdb.api :as xt])
  (:import [java.io Closeable]
           [java.util ArrayDeque Iterator]))

(defrecord Feed [node ^ArrayDeque entries ^long capacity state ^Closeable listener]
  Closeable
  (close [_] (.close listener)))

(defn- add-tx [{:keys [^ArrayDeque entries capacity state]} {::xt/keys [tx-id tx-ops] :as event}]
  (locking entries
    (when (:committed? event)
      (doseq [[op doc] tx-ops
              :when (and (= op ::xt/put) (map? doc) (= "file" (:type doc)))]
        (.addLast entries [tx-id (:xt/id doc) (:object_hash doc)])
        (when (> (.size entries) ^long capacity)
          ;; What is dropped may be part of a transaction: from now on only the transactions
          ;; after it are complete.
          (let [[dropped] (.removeFirst entries)]
            (swap! state assoc :complete-after dropped)))))
    (swap! state assoc :position tx-id)
    (.notifyAll entries)))

(def ^:private catch-up-ms
  "How long an answer waits for the listener to hear of what the node has indexed: far longer
  than the listener's lag (a hand-off between two threads); past it, the answer says where the
  feed is, and the client's next question asks from there, so nothing is skipped."
  2000)

(defn- catch-up
  "Wait, holding `entries`' monitor, until the feed has seen transaction `tx-id` (or
  `catch-up-ms` passed)."
  [^ArrayDeque entries state ^long tx-id]
  (let [deadline (+ (System/currentTimeMillis) ^long catch-up-ms)]
    (loop []
      (let [left (- deadline (System/currentTimeMillis))]
        (when (and (< (long (or (:position @state) -1)) tx-id) (pos? left))
          (.wait entries left)
          (recur))))))

(defn ->feed
  "Start keeping the file versions `node` indexes from now on (the last `capacity`)."
  [node capacity]
  (let [entries (ArrayDeque.)
        ;; Incomplete until the listener is in place: a transaction indexed before it is not in
        ;; the feed, so only those after the node's latest one from then on are complete.
        state (atom {:complete-after Long/MAX_VALUE :position nil})
        feed (map->Feed {:node node :entries entries :capacity capacity :state state})
        listener (xt/listen node {::xt/event-type ::xt/indexed-tx :with-tx-ops? true}
                            (fn [event] (add-tx feed event)))
        start (or (::xt/tx-id (xt/latest-completed-tx node)) -1)]
    (locking entries
      (swap! state (fn [{:keys [position] :as s}]
                     (assoc s :complete-after start :position (max (or position -1) start)))))
    (assoc feed :listener listener)))

(defn versions-after
  "`{\"position\" P, \"complete\" true, \"versions\" [[tx-id id object_hash] ...]}`: the file
  versions written after transaction `after` up to P, the last transaction the feed has seen;
  `complete` false (and no versions) when the feed does not go back that far, or `after` is nil."
  [{:keys [node ^ArrayDeque entries state]} after]
  (let [indexed (long (or (::xt/tx-id (xt/latest-completed-tx node)) -1))]
    (locking entries
      (catch-up entries state indexed)
      (let [{:keys [complete-after position]} @state]
        (if (or (nil? after) (< ^long after ^long complete-after))
          {"position" position "complete" false "versions" []}
          (let [it ^Iterator (.descendingIterator entries)
                found (loop [out '()]
                        (if (.hasNext it)
                          (let [entry (.next it)]
                            (if (> ^long (first entry) ^long after)
                              (recur (conj out entry))
                              out))
                          out))]
            {"position" position "complete" true "versions" (vec found)}))))))

(def ^:private far-future
  "The valid time reads are pinned to, as the adapter's are: the latest version at a basis."
  #inst "9999-12-31T00:00:00Z")

(defn with-documents
  "`answer` (of `versions-after`) with `\"documents\"`: the document, as of the answer's position,
  of each file in `held` (id -> the object_hash the client holds) whose latest version the answer
  lists has another hash. A client learns other clients' versions of its files from this one
  answer, without a second read (decision 0106). Nothing is added to an incomplete answer: the
  client then compares all its files itself."
  [{:keys [node]} answer held]
  (let [{position "position" complete "complete" found "versions"} answer
        latest (reduce (fn [m [_ id h]] (assoc m id h)) {} found)
        wanted (for [[id h] latest
                     :let [mine (get held id ::none)]
                     :when (and (not= mine ::none) (not= mine h))]
                 id)]
    (if (or (not complete) (nil? position) (empty? wanted))
      (assoc answer "documents" [])
      (let [db (xt/db node {::xt/valid-time far-future ::xt/tx {::xt/tx-id position}})]
        (assoc answer "documents" (into [] (keep #(xt/entity db %)) wanted))))))
