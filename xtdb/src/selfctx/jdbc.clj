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
  (:require [clojure.tools.logging :as log]
            [juxt.clojars-mirrors.nextjdbc.v1v2v674.next.jdbc :as jdbc]
            [xtdb.api :as xt]
            [xtdb.db :as db]
            [xtdb.jdbc :as j]
            [xtdb.system :as sys]
            [xtdb.tx.subscribe :as tx-sub])
  (:import [java.io Closeable]
           [java.sql Connection]
           [java.util.concurrent CompletableFuture Semaphore TimeUnit]
           [javax.sql DataSource]
           [xtdb.api ICursor]))

(def ^:private channel "selfctx_tx_log")
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

(defrecord WakingTxLog [inner pool ^Semaphore wake ^long poll-ms notify? running ^Thread listener]
  db/TxLog
  (submit-tx [this tx-events] (db/submit-tx this tx-events {}))
  (submit-tx [_ tx-events opts]
    ;; The row is inserted and committed inside the inner call; its answer is a delay.
    (let [submitted (db/submit-tx inner tx-events opts)]
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
                       :wake wake
                       :poll-ms poll-ms
                       :notify? notify?
                       :running running
                       :listener (when notify? (listen pool wake running))})))
