(ns selfctx.jdbc
  "XTDB's JDBC transaction log, told when there is something to read.

  `xtdb.jdbc/->tx-log` (1.24.5) indexes transactions by polling its table, and sleeps a fixed
  100 ms whenever a poll finds nothing new, on every node, the one that wrote the transaction
  included. A commit through a PostgreSQL-backed node therefore waits for that node's next poll:
  up to 100 ms per commit, several commits per agent turn. This module is that same tx-log
  (`submit-tx`, `open-tx-log`, `latest-submitted-tx` are XTDB's, unchanged) with another
  subscription loop: it waits at most `:poll-ms` between polls, and is woken at once

  - when this node submits a transaction (nothing to configure, nothing to pay), and
  - with `:notify? true` on PostgreSQL, when any node does: a trigger on the table notifies
    `selfctx_tx_log` in the very transaction that inserts a transaction's row (no statement or
    round trip of its own; where the trigger cannot be installed, each submit is followed by a
    `NOTIFY` instead), and each node keeps one connection `LISTEN`ing on that channel.

  See docs/decisions/0067-the-cluster-at-interactive-speed.md for what each option costs."
  (:require [clojure.string :as str]
            [clojure.tools.logging :as log]
            [juxt.clojars-mirrors.nextjdbc.v1v2v674.next.jdbc :as jdbc]
            [juxt.clojars.mirrors.nippy.v3v4v2.taoensso.nippy :as nippy]
            [selfctx.documents :as documents]
            [xtdb.api :as xt]
            [xtdb.codec :as c]
            [xtdb.db :as db]
            [xtdb.document-store :as ds]
            [xtdb.jdbc :as j]
            [xtdb.system :as sys]
            [xtdb.tx.event :as txe]
            [xtdb.tx.subscribe :as tx-sub])
  (:import [java.io Closeable]
           [java.sql Connection PreparedStatement]
           [java.util.concurrent CompletableFuture Semaphore TimeUnit]
           [javax.sql DataSource]
           [xtdb.api ICursor]))

(def ^:private channel "selfctx_tx_log")

(defn- in-transaction
  "`(f conn)` in one transaction on a connection of `pool`, committed if it returns, rolled back
  if it throws. `next.jdbc/with-transaction` asks the connection its isolation level first, and
  PostgreSQL's driver answers that with a round trip (`SHOW TRANSACTION ISOLATION LEVEL`) on every
  transaction; this one leaves the level as it is, PostgreSQL's default (read committed), which
  is what XTDB's JDBC stores ask for or keep."
  [^DataSource pool f]
  (with-open [^Connection conn (.getConnection pool)]
    (.setAutoCommit conn false)
    (try
      (let [out (f conn)]
        (.commit conn)
        out)
      (catch Throwable t
        (try (.rollback conn) (catch Exception _))
        (throw t))
      (finally
        (.setAutoCommit conn true)))))
(def ^:private ^:const batch 50)

(defn- wait-for-more
  "Block until woken or `poll-ms` have passed; forget wake-ups that came meanwhile (one poll
  reads everything submitted before it)."
  [^Semaphore wake ^long poll-ms]
  (.tryAcquire wake poll-ms TimeUnit/MILLISECONDS)
  (.drainPermits wake))

(defn- subscription
  "XTDB's polling subscription (`xtdb.tx.subscribe/handle-polling-subscription`), waiting on
  `wake` instead of sleeping a fixed 100 ms."
  [tx-log ^Semaphore wake poll-ms after-tx-id f]
  (tx-sub/completable-thread
   (fn [^CompletableFuture fut]
     (loop [after-tx-id after-tx-id]
       (let [last-tx-id
             (if-let [^ICursor cursor (try
                                        (db/open-tx-log tx-log after-tx-id {})
                                        (catch InterruptedException e (throw e))
                                        (catch Exception e
                                          (log/warn e "Error polling for txs, will retry")))]
               (try
                 (reduce (fn [_ txs]
                           (when (Thread/interrupted) (throw (InterruptedException.)))
                           (if (.isDone fut)
                             (reduced nil)
                             (do (f fut txs) (::xt/tx-id (last txs)))))
                         after-tx-id
                         (some->> cursor iterator-seq (partition-all batch)))
                 (finally (.close cursor)))
               after-tx-id)]
         (cond
           (.isDone fut) nil
           (Thread/interrupted) (throw (InterruptedException.))
           :else (do (when (= after-tx-id last-tx-id)
                       (wait-for-more wake poll-ms))
                     (recur last-tx-id))))))))

(defn- listen
  "A thread that keeps one connection LISTENing on the channel and wakes the subscription on
  every notification; it reconnects after a failure (polls carry on meanwhile)."
  [^DataSource pool ^Semaphore wake running]
  (doto (Thread.
         ^Runnable
         (fn []
           (while @running
             (try
               (with-open [^Connection conn (.getConnection pool)]
                 (.setAutoCommit conn true)
                 (jdbc/execute! conn [(str "LISTEN " channel)])
                 (let [pg (.unwrap conn org.postgresql.PGConnection)]
                   (while @running
                     (when (seq (.getNotifications ^org.postgresql.PGConnection pg 1000))
                       (.release wake)))))
               (catch InterruptedException _ (reset! running false))
               (catch Exception e
                 (when @running
                   (log/warn e "LISTEN" channel "failed; polling only, retrying in 1 s")
                   (try (Thread/sleep 1000) (catch InterruptedException _ (reset! running false))))))))
         "selfctx-tx-log-listen")
    (.setDaemon true)
    (.start)))

(defn- install-trigger!
  "Have PostgreSQL notify the channel whenever a transaction's row is inserted, inside the
  inserting transaction. True once installed; false (logged) where this database user may not
  create functions or triggers, and the submits then notify themselves."
  [^DataSource pool]
  (try
    (jdbc/with-transaction [tx pool]
      ;; nodes starting together install it one after the other
      (jdbc/execute! tx ["SELECT pg_advisory_xact_lock(-3455657)"])
      (jdbc/execute! tx [(str "CREATE OR REPLACE FUNCTION " channel "_notify() RETURNS trigger "
                              "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('" channel "', ''); "
                              "RETURN NULL; END $$")])
      (jdbc/execute! tx [(str "DROP TRIGGER IF EXISTS " channel "_notify ON tx_events")])
      (jdbc/execute! tx [(str "CREATE TRIGGER " channel "_notify AFTER INSERT ON tx_events "
                              "FOR EACH ROW WHEN (NEW.topic = 'txs') "
                              "EXECUTE FUNCTION " channel "_notify()")]))
    true
    (catch Exception e
      (log/warn e "cannot install the notifying trigger; each submit will NOTIFY")
      false)))

(defn- submit-row
  "`xtdb.jdbc/JdbcTxLog`'s `submit-tx` on PostgreSQL, the same statements (the table lock that
  keeps offsets in commit order, the row's INSERT ... RETURNING) and the same answer, in a
  transaction of `in-transaction`: one round trip fewer."
  [pool dialect tx-events opts]
  (let [tx-data (in-transaction
                 pool
                 (fn [tx]
                   (j/ensure-serializable-identity-seq! dialect tx "tx_events")
                   (-> (j/insert-event! dialect tx nil {::txe/tx-events tx-events
                                                        ::xt/submit-tx-opts opts} "txs")
                       (#'j/tx-result->tx-data tx dialect))))]
    (delay
      {::xt/tx-id (::xt/tx-id tx-data)
       ::xt/tx-time (or (::xt/tx-time opts) (::xt/tx-time tx-data))})))

(defrecord WakingTxLog [inner pool dialect ^Semaphore wake ^long poll-ms notify? running
                        ^Thread listener]
  db/TxLog
  (submit-tx [this tx-events] (db/submit-tx this tx-events {}))
  (submit-tx [_ tx-events opts]
    ;; The row is inserted and committed here; the answer is a delay, as XTDB's.
    (let [submitted (if (= :postgresql (j/db-type dialect))
                      (submit-row pool dialect tx-events opts)
                      (db/submit-tx inner tx-events opts))]
      (.release wake)
      (when (= notify? :statement)
        (try (jdbc/execute! pool [(str "NOTIFY " channel)])
             (catch Exception e (log/warn e "NOTIFY failed; other nodes will poll"))))
      submitted))
  (open-tx-log [_ after-tx-id opts] (db/open-tx-log inner after-tx-id opts))
  (latest-submitted-tx [_] (db/latest-submitted-tx inner))
  (subscribe [this after-tx-id f] (subscription this wake poll-ms after-tx-id f))

  Closeable
  (close [_]
    (reset! running false)
    (when listener (.interrupt listener))
    (.close ^Closeable inner)))

(defn ->tx-log
  "`xtdb.jdbc/->tx-log` whose subscription is woken by this node's submits (and, with
  `:notify?` on PostgreSQL, every node's) and polls at least every `:poll-ms`."
  {::sys/deps {:connection-pool `j/->connection-pool}
   ::sys/args {:fetch-size {:default 1024, :spec ::sys/pos-int}
               :poll-ms {:doc "Longest wait between two polls of the log (ms)"
                         :default 100
                         :spec ::sys/pos-int}
               :notify? {:doc "NOTIFY every node at each submit (PostgreSQL)"
                         :default true
                         :spec ::sys/boolean}}}
  [{:keys [connection-pool fetch-size poll-ms notify?] :as opts}]
  (let [inner (j/->tx-log (select-keys opts [:connection-pool :fetch-size]))
        {:keys [pool dialect]} connection-pool
        notify? (when (and notify? (= :postgresql (j/db-type dialect)))
                  (if (install-trigger! pool) :trigger :statement))
        wake (Semaphore. 0)
        running (atom true)]
    (map->WakingTxLog {:inner inner
                       :pool pool
                       :dialect dialect
                       :wake wake
                       :poll-ms poll-ms
                       :notify? notify?
                       :running running
                       :listener (when notify? (listen pool wake running))})))

;; The document store.

(defn- existing-keys
  "Of `ids` (strings), those with a live row, each row locked until the transaction ends: the
  statement of `xtdb.jdbc/doc-exists-sql`, for every id at once. Rows are locked in the order
  XTDB's store locks them, one id after the other in id order (each id's rows by offset), so
  that a node submitting with XTDB's store beside one with this never locks in the reverse
  order of it."
  [^Connection conn ids]
  (with-open [stmt (.prepareStatement
                    conn
                    (str "SELECT EVENT_KEY FROM tx_events WHERE EVENT_KEY IN ("
                         (str/join ", " (repeat (count ids) "?"))
                         ") AND COMPACTED = 0 ORDER BY EVENT_KEY, EVENT_OFFSET FOR UPDATE"))]
    (doseq [[i id] (map-indexed vector ids)]
      (.setString stmt (int (inc i)) ^String id))
    (with-open [rs (.executeQuery stmt)]
      (loop [out (transient #{})]
        (if (.next rs)
          (recur (conj! out (.getString rs 1)))
          (persistent! out))))))

(defn- batch!
  "One JDBC batch of `sql` over `rows` (each a vector of a string and bytes, bound in the order
  `bind` gives): one round trip to PostgreSQL, not one per row."
  [^Connection conn sql rows bind]
  (when (seq rows)
    (with-open [^PreparedStatement stmt (.prepareStatement conn sql)]
      (doseq [row rows]
        (let [[k ^bytes v] (bind row)]
          (.setBytes stmt 1 v)
          (.setString stmt 2 ^String k))
        (.addBatch stmt))
      (.executeBatch stmt))))

(defrecord BatchedJdbcDocumentStore [pool dialect inner]
  db/DocumentStore
  (fetch-docs [_ ids] (db/fetch-docs inner ids))

  (submit-docs [_ id-and-docs]
    ;; What `xtdb.jdbc/JdbcDocumentStore` writes, row for row: a document not yet stored is
    ;; inserted, one stored is updated in place, an evicted one is inserted and then replaces
    ;; every row of its id with the tombstone, all in one transaction. XTDB's store sends two
    ;; statements per document (a locking SELECT, then the INSERT or UPDATE); this one sends
    ;; one locking SELECT for all of them and one batch per kind of write.
    (let [docs (into (sorted-map) (for [[id doc] id-and-docs] [(str id) doc]))]
      (when (seq docs)
        (in-transaction
         pool
         (fn [^Connection tx]
          (let [existing (existing-keys tx (vec (keys docs)))
                {evicted true live false} (group-by (comp boolean c/evicted-doc? val) docs)
                {updates true inserts false} (group-by (comp boolean existing key) live)]
            (batch! tx "INSERT INTO tx_events (V, EVENT_KEY, TOPIC, COMPACTED) VALUES (?, ?, 'docs', 0)"
                    inserts (fn [[k doc]] [k (nippy/freeze doc)]))
            (batch! tx "UPDATE tx_events SET V = ? WHERE TOPIC = 'docs' AND EVENT_KEY = ?"
                    updates (fn [[k doc]] [k (nippy/freeze doc)]))
            (doseq [[k doc] evicted]
              (j/insert-event! dialect tx k doc "docs")
              (jdbc/execute! tx ["UPDATE tx_events SET V = ?, COMPACTED = 1 WHERE TOPIC = 'docs' AND EVENT_KEY = ?"
                                 (nippy/freeze doc) k]))))))))

  Closeable
  (close [_]))

(defn ->document-store
  "`xtdb.jdbc/->document-store` (same dependencies and table) that writes a transaction's
  documents in three round trips to PostgreSQL whatever their number, and keeps them in the
  document cache once written, as the RocksDB node's store does (`selfctx.documents`, decision
  0113): the node that wrote them indexes them without reading them back. See
  docs/decisions/0130-a-cluster-node-keeps-what-it-writes.md."
  {::sys/deps {:connection-pool `j/->connection-pool
               :document-cache 'xtdb.cache/->cache}}
  [{{:keys [pool dialect]} :connection-pool, :keys [document-cache]}]
  (let [upstream (j/->JdbcDocumentStore pool dialect)
        ;; the locking SELECT's form is PostgreSQL's; other databases write as XTDB does
        inner (documents/->CountedDocumentStore
               (if (= :postgresql (j/db-type dialect))
                 (->BatchedJdbcDocumentStore pool dialect upstream)
                 upstream))]
    (documents/->KeptDocumentStore document-cache
                                   (ds/->CachedDocumentStore document-cache inner)
                                   inner)))
