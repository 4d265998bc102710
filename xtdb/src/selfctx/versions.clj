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
  read. One writer thread writes every stream's lines (decision 0154): a stream holds a
  connection, not a request thread, and a transaction's notice wakes one thread, not one a
  stream."
  (:require [clojure.tools.logging :as log]
            [xtdb.api :as xt]
            [xtdb.bus :as bus]
            [xtdb.db :as db]
            [xtdb.tx.event :as txe])
  (:import [java.io Closeable OutputStream]
           [java.util ArrayDeque ArrayList Iterator]
           [java.util.concurrent LinkedBlockingQueue TimeUnit]
           [java.util.concurrent.atomic AtomicLong AtomicReference]))

(defrecord Feed [node ^ArrayDeque entries ^long capacity state ^Closeable listener streams
                 ^LinkedBlockingQueue events ^AtomicLong pushed ^Thread writer]
  Closeable
  (close [_]
    (.close listener)
    (locking entries
      (doseq [s @streams] (reset! (:open s) false))
      (.notifyAll entries))
    (when writer
      (.offer events [:stop])
      (.join writer 2000))))

(def ^:private backlog
  "Events (notices, streams opened, probes) the writer has not handled yet: past them every
  stream is closed (their processes then read every time, and connect again). The writer writes
  to sockets whose buffers hold megabytes, and one stuck on a process that stopped reading is
  interrupted after `catch-up-ms` (see `await-pushed`), so only a writer that cannot keep up at
  all gets there."
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

(defn- advance-pushed!
  "Every stream open when transaction `tx-id`'s notice was made has been written it (or closed):
  wake the commits waiting for it (`await-pushed`), and no one else."
  [{:keys [^AtomicLong pushed]} ^long tx-id]
  (locking pushed
    (when (< (.get pushed) tx-id)
      (.set pushed tx-id)
      (.notifyAll pushed))))

(defn- add-tx [{:keys [^ArrayDeque entries capacity state document-store streams events] :as feed}
               event]
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
        (if (empty? @streams)
          (advance-pushed! feed tx-id)
          ;; One notice for every stream, written by the one writer thread. A writer that
          ;; cannot take it: every stream is closed, their processes then read every time.
          (when-not (.offer ^LinkedBlockingQueue events [:notice tx-id {"position" tx-id
                                                                         "versions" found}])
            (doseq [s @streams] (reset! (:open s) false))
            (advance-pushed! feed tx-id))))
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

(def ^:private heartbeat-ms
  "How often every stream is written a line when nothing happened: how soon the node hears that a
  stream's process is gone (a write fails), and its process that the node is."
  10000)

(def ^:private ^bytes line-end (byte-array [10]))

(defn- write-line!
  "Write `bytes` to stream `s`'s connection, flushed: false, and `s` marked closed, when it fails
  (or `s` was closed). `current` names the stream being written, for `await-pushed`."
  [^AtomicReference current s ^bytes bytes]
  (and @(:open s)
       (try
         (.set current s)
         (let [^OutputStream out (:out s)]
           (.write out bytes)
           (.flush out))
         true
         ;; An IOException, nearly always (the process is gone, or the exchange was closed).
         (catch Exception _
           ;; An interrupted write (`await-pushed` gave up on it) leaves the flag set.
           (Thread/interrupted)
           (reset! (:open s) false)
           false)
         (finally (.set current nil)))))

(defn- end-stream!
  "Give stream `s`'s slot back and end its connection."
  [{:keys [^ArrayDeque entries streams]} s]
  (locking entries
    (reset! (:open s) false)
    (swap! streams disj s))
  (try ((:close s)) (catch Throwable _ nil)))

(defn- write-streams
  "The writer thread (decision 0154): every stream's lines, in the order the feed made them, from
  one thread. A stream's first line once it is handed over, each notice to every stream that
  started before it (then `advance-pushed!`: one thread woken a transaction, not one a stream),
  and `{}` then a line end, in two passes over the streams, every `heartbeat-ms`; a probe (the
  cap reached) writes two line ends the same way. A process that is gone answers the first pass's
  write with a reset, so the second pass fails and its slot is free at once."
  [{:keys [^LinkedBlockingQueue events ^AtomicReference current encode] :as feed}]
  (let [active (ArrayList.)
        each! (fn [^bytes bytes]
                (doseq [s (vec active)] (write-line! current s bytes)))
        sweep! (fn []
                 (let [it (.iterator active)]
                   (while (.hasNext it)
                     (let [s (.next it)]
                       (when-not @(:open s)
                         (.remove it)
                         (end-stream! feed s))))))
        line (fn [notice]
               (let [^bytes body (encode notice)
                     out (java.util.Arrays/copyOf body (inc (alength body)))]
                 (aset-byte out (alength body) 10)
                 out))
        heartbeat (.getBytes "{}" "UTF-8")]
    (loop [next-beat (+ (System/currentTimeMillis) ^long heartbeat-ms)]
      (Thread/interrupted)
      (let [wait (max 0 (- next-beat (System/currentTimeMillis)))
            event (try (.poll events wait TimeUnit/MILLISECONDS)
                       (catch InterruptedException _ nil))
            [kind a b] event]
        (when-not (= kind :stop)
          (try
            (case kind
              :join (let [^AtomicLong written (:written a)
                          start (.get written)]
                      (if (write-line! current a (line {"position" (when (>= start 0) start)}))
                        (.add active a)
                        (end-stream! feed a)))
              :notice (let [tx-id (long a)
                            bytes (line b)]
                        (doseq [s (vec active)
                                :let [^AtomicLong written (:written s)]
                                :when (< (.get written) tx-id)]
                          (when (write-line! current s bytes)
                            (.set written tx-id)))
                        (advance-pushed! feed tx-id))
              ;; The slots of the streams that failed are free before the probe is answered.
              :probe (do (each! line-end) (each! line-end) (sweep!) (deliver a true))
              nil)
            (catch Throwable e
              (log/warn e "the versions feed's writer failed on" kind)))
          (sweep!)
          (if (>= (System/currentTimeMillis) next-beat)
            (do (each! heartbeat)
                (each! line-end)
                (sweep!)
                (recur (+ (System/currentTimeMillis) ^long heartbeat-ms)))
            (recur next-beat)))))
    (doseq [s (vec active)] (end-stream! feed s))))

(defn ->feed
  "Start keeping the file versions `node` indexes from now on (the last `capacity`); `encode`
  turns a stream's notice into its line's bytes (without the line end)."
  [node capacity encode]
  (let [entries (ArrayDeque.)
        ;; Incomplete until the listener is in place: a transaction indexed before it is not in
        ;; the feed, so only those after the node's latest one from then on are complete.
        state (atom {:complete-after Long/MAX_VALUE :position nil})
        feed (map->Feed {:node node :entries entries :capacity capacity :state state
                         :document-store (:document-store node) :streams (atom #{})
                         :events (LinkedBlockingQueue. (int backlog))
                         :pushed (AtomicLong. -1)
                         :current (AtomicReference.)
                         :encode encode})
        writer (doto (Thread. ^Runnable (fn [] (write-streams feed)) "selfctx-versions-writer")
                 (.setDaemon true))
        feed (assoc feed :writer writer)
        ;; What `xt/listen` on `::xt/indexed-tx` hears, straight from the node's bus: the event
        ;; carries the transaction's events (decision 0108).
        listener (bus/listen (:bus node) {::xt/event-types #{:xtdb.tx/indexed-tx}}
                             (fn [event] (add-tx feed event)))
        start (or (::xt/tx-id (xt/latest-completed-tx node)) -1)]
    (.start writer)
    (locking entries
      (swap! state (fn [{:keys [position] :as s}]
                     (assoc s :complete-after start :position (max (or position -1) start)))))
    (assoc feed :listener listener)))

(defn subscribe
  "A slot for a stream of the feed (decision 0148) that will write to `out` and end its
  connection with `(close)`, or nil when `most` are taken. Nothing is written to it before
  `hand-over`."
  [{:keys [^ArrayDeque entries streams]} ^long most ^OutputStream out close]
  (locking entries
    (when (< (count @streams) most)
      (let [s {:out out
               :close close
               ;; The last transaction written to it; none is owed before `hand-over`.
               :written (AtomicLong. Long/MAX_VALUE)
               :open (atom true)}]
        (swap! streams conj s)
        s))))

(defn hand-over
  "Stream `s` (its response's head sent) to the writer thread: its first line is
  `{\"position\": P}`, P being the last transaction the feed has seen, then the file versions of
  every transaction after P. False when the writer cannot take it (the slot is given back)."
  [{:keys [^ArrayDeque entries state ^LinkedBlockingQueue events] :as feed} s]
  (let [handed (locking entries
                 (.set ^AtomicLong (:written s) (long (or (:position @state) -1)))
                 (and @(:open s) (.offer events [:join s])))]
    (or handed (do (end-stream! feed s) false))))

(defn unsubscribe
  "Give `s`'s slot back (its connection is its route's to end)."
  [{:keys [^ArrayDeque entries streams]} s]
  (locking entries
    (reset! (:open s) false)
    (swap! streams disj s)))

(defn probe
  "Before a new stream is refused: write every stream two line ends (as a heartbeat does), so
  that those of processes that are gone fail and give their slots back; waits for it, 1 s at most."
  [{:keys [^LinkedBlockingQueue events]}]
  (let [done (promise)]
    (when (.offer events [:probe done])
      (deref done 1000 nil))))

(defn open-streams
  "How many streams hold a slot."
  [{:keys [streams]}]
  (count @streams))

(defn await-pushed
  "Wait until the feed has seen transaction `tx-id` and the writer has written what it wrote to
  every stream open then, or `catch-up-ms` passed: every stream still behind then is closed (its
  process reads every time from then on), and a write the writer is stuck in (a process that
  stopped reading, its socket's buffers full) is interrupted. Called before a commit that wrote a
  file version is answered, so that a process told of another's commit finds its versions on its
  own stream (decision 0148). One wait a commit, woken once when its notice is written."
  [{:keys [^ArrayDeque entries state streams ^AtomicLong pushed ^AtomicReference current
           ^Thread writer]} ^long tx-id]
  (let [deadline (+ (System/currentTimeMillis) ^long catch-up-ms)]
    (locking entries
      (catch-up entries state tx-id))
    (locking pushed
      (loop []
        (let [left (- deadline (System/currentTimeMillis))]
          (when (and (< (.get pushed) tx-id) (pos? left))
            (.wait pushed left)
            (recur)))))
    (when (< (.get pushed) tx-id)
      (let [stuck (.get current)]
        (doseq [s @streams
                :when (< (.get ^AtomicLong (:written s)) tx-id)]
          (reset! (:open s) false))
        (when (and stuck (identical? stuck (.get current)))
          (.interrupt writer))))))

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
