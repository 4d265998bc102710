(ns selfctx.warm-up
  "The node's request path compiled before the node answers its first request (decision 0167).

  A JVM runs new code interpreted and compiles it as it gets hot: a node started for a run
  spent about 7 ms of a proxied request's 17-20 ms of CPU in its JIT compilers over its first
  hundreds of requests (decision 0165). So, before the node's own HTTP server starts, `run`
  starts a scratch in-memory XTDB node in the same JVM (the compiled code is the JVM's, shared by
  every node in it), serves it over a scratch HTTP server on an ephemeral loopback port with a
  secret of its own, and sends it, for a bounded time and at most a bounded number of rounds,
  the requests a proxied turn sends: commits of a log entry, a request record and a session
  version (`match` then `put`, two chunks as `logged=true` answers them), now and then a file
  version with its text as a blob, entity reads, the `type` query, the versions feed read and
  posted. Then it closes both. Nothing of the node's own store, feed or counters is touched: the
  scratch node is in memory and its document store counts nothing."
  (:require [clojure.data.json :as json]
            [clojure.string :as str]
            [clojure.tools.logging :as log]
            [xtdb.api :as xt])
  (:import [java.io ByteArrayOutputStream Closeable]
           [java.net URI URLEncoder]
           [java.net.http HttpClient HttpClient$Version HttpRequest HttpRequest$BodyPublishers
            HttpResponse HttpResponse$BodyHandlers]
           [java.nio.charset StandardCharsets]
           [java.security SecureRandom]
           [java.util Base64]))

(set! *warn-on-reflection* true)

(def ^:private most-rounds
  "Rounds at most, whatever the time allows (about 1,000 requests): on a quiet machine this ends
  the warm-up before its time does; under load the time does (decision 0167)."
  200)

(def ^:private scratch-config
  ;; The node configs' own modules (xtdb/config/memory.edn), the document store's counters off.
  {:xtdb/document-store {:xtdb/module 'selfctx.documents/->document-store
                         :counted? false
                         :document-cache {:xtdb/module 'selfctx.cache/->cache
                                          :max-bytes (* 16 1024 1024)}}
   :xtdb/index-store {:xtdb/module 'selfctx.index/->index-store :indexed #{:type}}
   :xtdb/query-engine {:fn-allow-list '[clojure.core/>]}})

(defn- secret ^String []
  (let [bytes (byte-array 32)]
    (.nextBytes (SecureRandom.) bytes)
    (.encodeToString (Base64/getUrlEncoder) bytes)))

(defn- call
  "One request to the scratch server (HTTP/1.1, the connection kept); its status."
  [^HttpClient client ^String base ^String auth ^String method ^String path
   ^String content-type ^bytes body & [headers]]
  (let [b (-> (HttpRequest/newBuilder (URI. (str base path)))
              (.header "Authorization" auth))]
    (doseq [[k v] headers] (.header b k v))
    (if body
      (-> b (.header "Content-Type" content-type)
          (.method method (HttpRequest$BodyPublishers/ofByteArray body)))
      (.method b method (HttpRequest$BodyPublishers/noBody)))
    (.statusCode (.send client (.build b) (HttpResponse$BodyHandlers/ofByteArray)))))

(defn- utf8 ^bytes [^String s] (.getBytes s StandardCharsets/UTF_8))

(defn- enc ^String [^String s] (URLEncoder/encode s StandardCharsets/UTF_8))

(defn- text
  "A few hundred characters of lines, different in each round (documents differ by content)."
  [i]
  (str/join "\n" (map (fn [j] (str "    line " j " of round " i ": {\"k\": \"v\\t" (* i j) "\"}"))
                      (range 12))))

(defn- session-doc [i]
  {"xt/id" "session:warm-up" "type" "session" "seq" i "model" "scratch"
   "held" (vec (for [j (range 8)] (str "object:" (mod (+ i j) 50))))})

(defn- turn-body
  "The commit of one proxied request: its log entry, its request record, the session's next
  version over the one it read (`match`)."
  [i]
  {"tx-ops" [["put" {"xt/id" (str "log:warm-up:" i) "type" "log" "session_id" "warm-up" "seq" i
                     "request" (str "request:warm-up:" i) "tokens" (* 37 i)
                     "objects" (vec (for [j (range 6)] [(str "object:" j) (str "h" (* i j)) j]))}]
              ["put" {"xt/id" (str "request:warm-up:" i) "type" "request" "session_id" "warm-up"
                      "model" "scratch" "text" (text i) "status" 200 "ms" 1.5}]
              ["match" "session:warm-up" (if (pos? i) (session-doc (dec i)) nil)]
              ["put" (session-doc i)]]})

(defn- file-body
  "A file version whose text goes as a blob (decision 0015): the JSON head's length is the
  header, the text follows it. `[head-length body]`."
  [i]
  (let [content (utf8 (text i))
        head (utf8 (json/write-str
                    {"tx-ops" [["put" {"xt/id" (str "file:warm-up:" (mod i 20)) "type" "file"
                                       "path" (str "src/f" (mod i 20) ".py")
                                       "object_hash" (str "h" i)}]]
                     "blobs" [[0 "text" (alength content)]]}))
        out (ByteArrayOutputStream.)]
    (.write out head)
    (.write out content)
    [(alength head) (.toByteArray out)]))

(def ^:private type-query
  (utf8 "{:query {:find [?e] :where [[?e :type ?type]] :in [?type]} :in-args [\"file\"]}"))

(defn- round
  "One proxied turn's requests; the statuses that were not 200."
  [client base auth i]
  (let [call (partial call client)
        json-post (fn [path body] (call base auth "POST" path "application/json" body))
        statuses
        [(json-post "/_xtdb/submit-tx?await-timeout=10000&logged=true"
                    (utf8 (json/write-str (turn-body i))))
         (call base auth "GET" (str "/_xtdb/entity?eid=" (enc "session:warm-up")
                                    "&valid-time=" (enc "9999-12-31T00:00:00Z"))
               nil nil)
         (call base auth "GET" (str "/_xtdb/entity?eid=" (enc (str "log:warm-up:" i))) nil nil)
         (call base auth "GET" (str "/_xtdb/selfctx/versions?after-tx-id=" (max 0 (- i 5)))
               nil nil)]
        more
        (when (zero? (mod i 4))
          (let [[n body] (file-body i)]
            [(call base auth "POST" "/_xtdb/submit-tx?await-timeout=10000" "application/json" body
                   {"X-Selfctx-Blobs" (str n)})
             (call base auth "POST" "/_xtdb/query" "application/edn" type-query)
             (json-post "/_xtdb/selfctx/versions?after-tx-id=0"
                        (utf8 (json/write-str {"held" [[(str "file:warm-up:" (mod i 20)) "h0"]]})))
             (call base auth "GET" "/_xtdb/status" nil nil)]))]
    (remove #(= 200 %) (concat statuses more))))

(defn run
  "Warm the JVM for `ms` milliseconds at most, one round at least (0: not at all): `serve` is called with a scratch
  node and the `Authorization` header's expected bytes and returns a `Closeable` server whose
  `:port` it listens on. Returns `{:rounds n :ms t}`, or nil when not run. A failure is logged
  and ends the warm-up early: the node starts all the same."
  [^long ms serve]
  (when (pos? ms)
    (let [started (System/nanoTime)
          deadline (+ started (* ms 1000000))
          key (secret)
          auth (str "Bearer " key)
          rounds (volatile! 0)]
      (try
        (with-open [^Closeable node (xt/start-node scratch-config)
                    ^Closeable server (serve node (utf8 auth))]
          (let [base (str "http://127.0.0.1:" (:port server))
                client (-> (HttpClient/newBuilder) (.version HttpClient$Version/HTTP_1_1) .build)]
            (loop [i 0]
              ;; One round whatever the time: the scratch node's own start may take all of it.
              (when (and (< i most-rounds) (or (zero? i) (< (System/nanoTime) deadline)))
                (let [failed (round client base auth i)]
                  (vreset! rounds (inc i))
                  (if (seq failed)
                    (log/warn "the warm-up stopped: its scratch node answered" (vec failed))
                    (recur (inc i))))))))
        (catch Throwable e
          (log/warn e "the warm-up failed; the node starts without it")))
      (let [result {:rounds @rounds :ms (quot (- (System/nanoTime) started) 1000000)}]
        (log/info "warm-up:" (:rounds result) "rounds in" (:ms result) "ms")
        result))))
