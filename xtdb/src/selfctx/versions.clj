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
  was asked.

  Each client process may also hold a stream of the feed (decision 0148): the node pushes, to
  every open stream, the file versions each transaction wrote, and a commit that wrote a file
  version is answered only once every open stream has been written what it wrote. A process
  whose stream is open, and whose stream says nothing of the files a session holds, knows that
  no other writer's version of them can be indexed and answered before its read: it skips the
  read."
  (:require [xtdb.api :as xt]
            [xtdb.bus :as bus]
            [xtdb.db :as db]
            [xtdb.tx.event :as txe])
  (:import [java.io Closeable]
           [java.util ArrayDeque Iterator]
           [java.util.concurrent LinkedBlockingQueue TimeUnit]
           [java.util.concurrent.atomic AtomicLong]))

(defrecord Feed [node ^ArrayDeque entries ^long capacity state ^Closeable listener streams]
  Closeable
  (close [_]
    (.close listener)
    (locking entries
      (doseq [s @streams] (reset! (:open s) false))
      (reset! streams #{})
      (.notifyAll entries))))

(def ^:private stream-backlog
  "Notices a stream holds that its writer has not written yet: past them the stream is closed
  (its process then reads every time, and connects again). A stream's writer writes to a socket
  whose buffers hold megabytes, so only a process that stopped reading gets there."
  4096)

(defn- put-documents
  "The documents a transaction's events put, in their order: what the transaction's tx-ops would
  carry, read without them. The node's `listen` `:with-tx-ops?` fetches every document the
  transaction names (a `match`'s expected ones too) and renames each one's id key, for every
  transaction, on the bus listener's thread: the feed needs the ones put alone, and their
  `:type`, id and `:object_hash` (decision 0108)."
  [document-store tx-events]
  (let [hashes (into [] (keep (fn [[op _ doc-hash]] (when (= op :crux.tx/put) doc-hash))) tx-events)]
    (when (seq hashes)
      (let [docs (db/fetch-docs document-store hashes)]
        (keep #(get docs %) hashes)))))

(defn- add-tx [{:keys [^ArrayDeque entries capacity state document-store streams]} event]
  (let [tx-id (::xt/tx-id (:submitted-tx event))
        docs (when (:committed? event) (put-documents document-store (::txe/tx-events event)))
        ;; The document store keeps a document's id under XTDB's own key.
        found (into [] (comp (filter #(and (map? %) (= "file" (:type %))))
                             (map (fn [doc] [tx-id (:crux.db/id doc) (:object_hash doc)])))
                    docs)]
    (locking entries
      (doseq [entry found]
        (.addLast entries entry)
        (when (> (.size entries) ^long capacity)
          ;; What is dropped may be part of a transaction: from now on only the transactions
          ;; after it are complete.
          (let [[dropped] (.removeFirst entries)]
            (swap! state assoc :complete-after dropped))))
      (when (seq found)
        (doseq [s @streams
                :when @(:open s)]
          ;; A stream that cannot take it is closed: its process then reads every time.
          (when-not (.offer ^LinkedBlockingQueue (:queue s) {"position" tx-id "versions" found})
            (reset! (:open s) false))))
      (swap! state assoc :position tx-id)
      (.notifyAll entries))))

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
        feed (map->Feed {:node node :entries entries :capacity capacity :state state
                         :document-store (:document-store node) :streams (atom #{})})
        ;; What `xt/listen` on `::xt/indexed-tx` hears, straight from the node's bus: the event
        ;; carries the transaction's events (decision 0108).
        listener (bus/listen (:bus node) {::xt/event-types #{:xtdb.tx/indexed-tx}}
                             (fn [event] (add-tx feed event)))
        start (or (::xt/tx-id (xt/latest-completed-tx node)) -1)]
    (locking entries
      (swap! state (fn [{:keys [position] :as s}]
                     (assoc s :complete-after start :position (max (or position -1) start)))))
    (assoc feed :listener listener)))

(defn subscribe
  "A stream of the feed (decision 0148), or nil when `most` are open already:
  `{:start P ...}`, P being the last transaction the feed has seen; the file versions of every
  transaction after P are queued for it, for `next-notice`."
  [{:keys [^ArrayDeque entries state streams]} ^long most]
  (locking entries
    (when (< (count @streams) most)
      (let [start (long (or (:position @state) -1))
            s {:start start
               :queue (LinkedBlockingQueue. (int stream-backlog))
               :written (AtomicLong. start)
               :open (atom true)}]
        (swap! streams conj s)
        s))))

(defn unsubscribe [{:keys [^ArrayDeque entries streams]} s]
  (locking entries
    (reset! (:open s) false)
    (swap! streams disj s)
    (.notifyAll entries)))

(defn next-notice
  "The stream's next notice, `{\"position\" tx-id \"versions\" [[tx-id id object_hash] ...]}`;
  `{}` when none came within `wait-ms` (a heartbeat: a client not hearing one in a while takes
  the stream for lost); nil once the stream is closed."
  [s ^long wait-ms]
  (when @(:open s)
    (or (.poll ^LinkedBlockingQueue (:queue s) wait-ms TimeUnit/MILLISECONDS) {})))

(defn written!
  "The stream's writer wrote `notice` to its socket (flushed)."
  [{:keys [^ArrayDeque entries]} s notice]
  (when-let [position (get notice "position")]
    (.set ^AtomicLong (:written s) (long position))
    (locking entries (.notifyAll entries))))

(defn await-pushed
  "Wait until the feed has seen transaction `tx-id` and every open stream's writer has written
  what it wrote, or `catch-up-ms` passed: a stream still behind then is closed (its process reads
  every time from then on). Called before a commit that wrote a file version is answered, so that
  a process told of another's commit finds its versions on its own stream (decision 0148)."
  [{:keys [^ArrayDeque entries state streams]} ^long tx-id]
  (let [deadline (+ (System/currentTimeMillis) ^long catch-up-ms)]
    (locking entries
      (catch-up entries state tx-id)
      (loop []
        (let [behind (filter #(and @(:open %) (< (.get ^AtomicLong (:written %)) tx-id)) @streams)
              left (- deadline (System/currentTimeMillis))]
          (when (seq behind)
            (if (pos? left)
              (do (.wait entries left) (recur))
              (doseq [s behind] (reset! (:open s) false)))))))))

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
