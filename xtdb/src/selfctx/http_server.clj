(ns selfctx.http-server
  "The HTTP front of the XTDB 1.24 nodes that self-context-manager runs.

  It serves the part of XTDB 1.x's REST API (`/_xtdb/...`) that the Python adapter uses, with the
  same paths, parameters, status codes and JSON shapes as `xtdb-http-server`, so the adapter works
  against either. It exists because `com.xtdb/xtdb-http-server` (and the Clojars-only libraries
  under it) cannot be fetched from the Maven Central the project is restricted to; see
  docs/xtdb.md. It needs nothing beyond the JDK's built-in HTTP server and clojure.data.json,
  which xtdb-core already depends on.

  Deliberate differences from xtdb-http-server, each because the upstream behaviour is a trap:
  - JSON integers are read as Long, never Integer, so a document read back through JSON and sent
    again as a `match` document has the same content hash (https://github.com/xtdb/xtdb/issues/2528).
  - Timestamps keep their milliseconds (upstream truncates to whole seconds).
  - A malformed tx-op gets a 400 that says what is wrong (upstream: `Malformed request`), and
    so does a body with more than white space after its JSON value (decision 0108).
  - `submit-tx?await-timeout=MS` also awaits the transaction and answers whether it committed
    (`200 {\"txId\", \"txTime\", \"txCommitted?\"}`): one round trip per commit instead of three.
    A refused one adds `\"current\": [[id, doc], ...]`, the documents its `match` ops named as
    of it (decision 0106). Without the parameter it answers as upstream does. With `logged=true`
    too, the answer is two lines, chunked: `{\"txId\", \"txTime\"}` flushed once the transaction
    is in the tx-log, then the line above once it is indexed (decision 0138).
  - `submit-tx` with an `X-Selfctx-Blobs` header takes long string values as raw UTF-8 after a
    JSON head (see `blob-body`); `/_xtdb/status` says so with \"selfctxBlobs\": 1.
  - `tx-log` takes `limit=N` (at most N transactions); with `with-ops=true` the ops are
    `txOps: [[\"put\", doc], ...]`.
  - `GET /_xtdb/selfctx/versions?after-tx-id=N` (ours): the file versions written after N, from
    the feed the node keeps (`selfctx.versions`); `/status` counts the requests answered. A
    `POST` there with `{\"held\": [[id, object_hash], ...]}` adds the documents of the held
    files that have newer versions (decision 0106). `GET /_xtdb/selfctx/versions/stream`: the
    same feed pushed, one line a transaction that wrote file versions, and a commit that wrote
    one is answered once every open stream has been written it (decision 0148).
  - Only JSON responses; the server binds to the given host (default 127.0.0.1) only.
  - Only its owner gets in (decision 0027, `selfctx.guard`): every request carries the secret
    read from `:secret-file` at start (401 otherwise); requests a web page could make get 403, a
    body of another content type than the route's gets 415. Transaction functions (`fn` ops,
    `xt/fn` documents) are refused, and so is a query naming a namespaced symbol: both would run
    code. The node's query engine allows only pure predicates (`:fn-allow-list` in the configs)."
  (:require [clojure.data.json :as json]
            [clojure.edn :as edn]
            [clojure.instant :as instant]
            [clojure.string :as str]
            [clojure.tools.logging :as log]
            [selfctx.documents :as documents]
            [selfctx.guard :as guard]
            [selfctx.versions :as versions]
            [selfctx.warm-up :as warm-up]
            [xtdb.api :as xt]
            [xtdb.codec :as c]
            [xtdb.system :as sys])
  (:import [com.sun.net.httpserver HttpExchange HttpHandler HttpServer]
           [java.io Closeable]
           [java.net InetSocketAddress URLDecoder]
           [java.nio.charset StandardCharsets]
           [java.time Duration]
           [java.util.concurrent ExecutorService Executors ThreadFactory TimeoutException]
           [java.util.concurrent.atomic AtomicLong]
           [xtdb.api NodeOutOfSyncException]))

;; ---- JSON ----------------------------------------------------------------------------------

(defn- write-json-string
  "A string as JSON, appended in runs: data.json 2.5's own writer goes a character at a time, with
  a set lookup per character, once a string holds anything to escape (a line break will do), and
  that was 40% of the node's CPU when answering a batch read of tool outputs. Escapes what JSON
  requires, U+2028/U+2029 (as data.json does) and any unpaired surrogate, which has no UTF-8 form
  (as \\uXXXX, so that it reaches the client as it was stored)."
  [^String s ^Appendable out]
  (let [n (.length s)
        escape (fn [^Appendable out ^long code]
                 (case code
                   34 (.append out "\\\"")
                   92 (.append out "\\\\")
                   10 (.append out "\\n")
                   13 (.append out "\\r")
                   9 (.append out "\\t")
                   8 (.append out "\\b")
                   12 (.append out "\\f")
                   (.append out (format "\\u%04x" code))))]
    (.append out \")
    (loop [i 0 start 0]
      (if (< i n)
        (let [c (.charAt s i)
              code (int c)]
          (cond
            (and (Character/isHighSurrogate c) (< (inc i) n)
                 (Character/isLowSurrogate (.charAt s (inc i))))
            (recur (+ i 2) start)
            (or (< code 32) (== code 34) (== code 92) (== code 0x2028) (== code 0x2029)
                (Character/isSurrogate c))
            (do (.append out s start i)
                (escape out code)
                (recur (inc i) (inc i)))
            :else (recur (inc i) start)))
        (.append out s start n)))
    (.append out \")))

(extend String json/JSONWriter {:-write (fn [s out _opts] (write-json-string s out))})

;; Content hashes and ids print as their 40-hex form, like upstream.
(extend xtdb.codec.Id json/JSONWriter {:-write (fn [x out opts] (json/-write (str x) out opts))})
(extend xtdb.codec.EDNId json/JSONWriter {:-write (fn [x out opts] (json/-write (str x) out opts))})

(defn- key->json
  "Document keys keep their namespace (`:xt/id` -> \"xt/id\"); data.json's default drops it."
  [k]
  (if (keyword? k) (subs (str k) 1) (str k)))

(defn- camel-case
  "`:xtdb.api/tx-id` -> \"txId\": upstream's casing of the top-level keys of system maps."
  [k]
  (let [[head & tail] (str/split (name k) #"-")]
    (apply str head (map str/capitalize tail))))

(defn- camel-keys [m]
  (into {} (map (fn [[k v]] [(camel-case k) v])) m))

(defn- write-json ^bytes [body]
  (.getBytes (json/write-str body :key-fn key->json :escape-unicode false :escape-slash false)
             StandardCharsets/UTF_8))

(defn- read-json [^String s]
  ;; Every object key becomes a keyword at every depth, as upstream's jsonista mapper does, so
  ;; documents written as JSON can be queried with `:attr` and compared with EDN literals. One
  ;; value and nothing after it but white space: data.json alone would read the value and drop
  ;; the rest unread (decision 0108).
  (json/read-str (str/trimr s) :key-fn keyword :extra-data-fn json/on-extra-throw))

;; ---- requests and responses ----------------------------------------------------------------

(defn- ascii-lower? [c] (let [c (int c)] (and (>= c 97) (<= c 122))))
(defn- ascii-upper? [c] (let [c (int c)] (and (>= c 65) (<= c 90))))

(defn- param-name
  "A query parameter's name as a keyword, camelCase and kebab-case spellings alike (upstream
  accepts both): `awaitTimeout` and `await-timeout` are `:await-timeout`. The same as a `-`
  between each lower-case ASCII letter and the upper-case one after it, then lower case, but
  written out: it runs for every parameter of every request (decision 0151)."
  [^String k]
  (let [n (.length k)
        sb (StringBuilder. (+ n 4))]
    (loop [i 0, prev-lower? false]
      (when (< i n)
        (let [c (.charAt k i)]
          ;; A letter that got a `-` before it is not a lower-case one for the next.
          (if (and prev-lower? (ascii-upper? c))
            (do (.append sb \-) (.append sb c) (recur (inc i) false))
            (do (.append sb c) (recur (inc i) (ascii-lower? c)))))))
    (keyword (.toLowerCase (.toString sb)))))

(defn- url-decode ^String [^String s]
  ;; Only a value with an escape or a `+` needs the decoder; the adapter's rarely have one.
  (if (and (neg? (.indexOf s "%")) (neg? (.indexOf s "+")))
    s
    (URLDecoder/decode s StandardCharsets/UTF_8)))

(defn- parse-query
  "A raw query string (`a=1&bB=%32`) as `{:a \"1\", :b-b \"2\"}`: pairs split at `&`, empty
  ones skipped, names and values URL-decoded, the last of a repeated name kept."
  [^String raw]
  (if (or (nil? raw) (zero? (.length raw)))
    {}
    (loop [start 0, params (transient {})]
      (let [end (let [i (.indexOf raw "&" (int start))] (if (neg? i) (.length raw) i))
            params (if (< start end)
                     (let [pair (.substring raw (int start) (int end))
                           eq (.indexOf pair "=")
                           k (if (neg? eq) pair (.substring pair 0 eq))
                           v (if (neg? eq) "" (.substring pair (inc eq)))]
                       (assoc! params (param-name (url-decode k)) (url-decode v)))
                     params)]
      (if (< end (.length raw))
        (recur (inc end) params)
        (persistent! params))))))

(defn- query-params [^HttpExchange ex]
  (parse-query (.getRawQuery (.getRequestURI ex))))

(defn- body-string ^String [^HttpExchange ex]
  (String. (.readAllBytes (.getRequestBody ex)) StandardCharsets/UTF_8))

(def ^:private ^:const response-chunk (* 64 1024))

(defn- respond [^HttpExchange ex status body]
  (let [^bytes bytes (write-json body)]
    (doto (.getResponseHeaders ex)
      (.set "Content-Type" "application/json; charset=utf-8"))
    (.sendResponseHeaders ex (int status) (alength bytes))
    ;; In pieces: the JDK copies each write to the socket into a temporary direct buffer of the
    ;; write's size and keeps it for the thread's next write. One write of a 26 MB answer (a
    ;; resume's batch read) would hold 26 MB of direct memory on each of the pool's threads until
    ;; -XX:MaxDirectMemorySize ran out, and the node would stop answering.
    (with-open [out (.getResponseBody ex)]
      (loop [offset 0]
        (when (< offset (alength bytes))
          (let [n (min response-chunk (- (alength bytes) offset))]
            (.write out bytes offset n)
            (recur (+ offset n))))))))

(defn- error-body [^Throwable e]
  {"error" (or (ex-message e) (.getName (class e)))
   "class" (.getName (class e))})

;; A handler that answered the exchange itself returns `[responded nil]`.
(def ^:private responded ::responded)

(defn- respond-logged
  "`submit-tx?logged=true`'s answer (decision 0138): status 200, chunked; the line `logged` as
  soon as it is known, flushed, then the line `(verdict)`, or, should working it out fail, the
  line `{\"error\", \"class\", \"status\"}` with the status the one-chunk answer would have had."
  [^HttpExchange ex logged verdict]
  (doto (.getResponseHeaders ex)
    (.set "Content-Type" "application/x-ndjson; charset=utf-8"))
  (.sendResponseHeaders ex 200 0)
  (with-open [out (.getResponseBody ex)]
    (.write out (write-json logged))
    (.write out (int 10))
    (.flush out)
    (let [line (try (verdict)
                    (catch TimeoutException e
                      (assoc (error-body e) "status" 500 "type" "exception"))
                    (catch Throwable e
                      (log/warn e "a logged transaction's verdict failed")
                      (assoc (error-body e) "status" 500 "type" "exception")))]
      (.write out (write-json line))
      (.write out (int 10))))
  [responded nil])

(defn- bad-request [message & [data]]
  (throw (ex-info message (merge {::status 400} data))))

(defn- ->long [params k]
  (when-let [v (get params k)]
    (try (Long/parseLong v)
         (catch NumberFormatException _ (bad-request (str "not an integer: " (name k) "=" v))))))

(defn- ->date [params k]
  (when-let [v (get params k)]
    (try (instant/read-instant-date v)
         (catch Exception _ (bad-request (str "not a timestamp: " (name k) "=" v))))))

(defn- ->duration [params k]
  (some-> (->long params k) Duration/ofMillis))

(defn- flag? [params k] (= "true" (get params k)))

(defn- db-for [node params]
  (let [tx-id (->long params :tx-id)
        tx-time (->date params :tx-time)]
    (xt/db node (cond-> {}
                  (->date params :valid-time) (assoc ::xt/valid-time (->date params :valid-time))
                  tx-id (assoc ::xt/tx {::xt/tx-id tx-id})
                  (and tx-time (not tx-id)) (assoc ::xt/tx-time tx-time)))))

(defn- eid-of [params]
  (cond
    (contains? params :eid-edn) (c/read-edn-string-with-readers (:eid-edn params))
    (contains? params :eid-json) (json/read-str (:eid-json params) :key-fn keyword)
    (contains? params :eid) (:eid params)
    :else (bad-request "Missing eid")))

;; ---- tx-ops in JSON ------------------------------------------------------------------------

(defn- op-time [v]
  (try (instant/read-instant-date v)
       (catch Exception _ (bad-request (str "not a valid time in a tx-op: " (pr-str v))))))

(def ^:private code-refused
  "transaction functions are not accepted by this node: they run code on it (decision 0027)")

(defn- json->doc [doc]
  (when-not (and (map? doc) (contains? doc :xt/id))
    (bad-request (str "a document must be an object with an \"xt/id\": " (pr-str doc))))
  ;; Upstream installs a document's `xt/fn` as a transaction function: code any later `fn` op
  ;; runs. The adapter needs none, so none is stored.
  (when (contains? doc :xt/fn) (bad-request code-refused))
  doc)

(defn- json->tx-op [op]
  (when-not (and (vector? op) (string? (first op)))
    (bad-request (str "a tx-op must be an array starting with its name: " (pr-str op))))
  (let [[op-name & args] op
        times #(mapv op-time %)]
    (case op-name
      "put" (let [[doc & ts] args] (into [::xt/put (json->doc doc)] (times ts)))
      "delete" (let [[eid & ts] args] (into [::xt/delete eid] (times ts)))
      "match" (let [[eid doc & ts] args]
                (into [::xt/match eid (some-> doc json->doc)] (times ts)))
      "evict" [::xt/evict (first args)]
      "fn" (bad-request code-refused)
      (bad-request (str "unknown tx-op " (pr-str op-name)
                        "; expected put, delete, match or evict")))))

;; ---- handlers ------------------------------------------------------------------------------

(defn- tx->json
  "`{\"txId\", \"txTime\"}` of a transaction (those it has, in that order): what
  `(camel-keys (select-keys tx [::xt/tx-id ::xt/tx-time]))` gives, without splitting and
  capitalising the two names on each of the one or two answers of every commit (decision 0151)."
  [tx]
  (when tx
    (cond-> {}
      (contains? tx ::xt/tx-id) (assoc "txId" (::xt/tx-id tx))
      (contains? tx ::xt/tx-time) (assoc "txTime" (::xt/tx-time tx)))))

(defn- json-body [^String s]
  (try (read-json s)
       (catch Exception e (bad-request (str "request body is not JSON: " (.getMessage e))))))

(defn- blob-body
  "Our extension (decision 0015): with `X-Selfctx-Blobs: N` the body is N bytes of JSON, then the
  UTF-8 bytes of long string values, one after another. The JSON's `blobs` lists them in order as
  `[op, key, length]`: the value of `key` in the document of tx-op `op` (a put's document or a
  match's expected one). Reading megabytes of source text this way skips JSON's escapes, the
  largest part of reading a commit of files."
  [^bytes raw ^String head]
  (let [size (alength raw)
        n (try (Long/parseLong head) (catch NumberFormatException _ -1))
        _ (when-not (<= 0 n size)
            (bad-request (str "X-Selfctx-Blobs must be the byte length of the body's JSON head, "
                              "at most " size ": " (pr-str head))))
        body (json-body (String. raw 0 (int n) StandardCharsets/UTF_8))
        blobs (:blobs body)]
    (when-not (vector? blobs) (bad-request "a body with blobs must list them in \"blobs\": [...]"))
    (loop [ops (:tx-ops body), todo (seq blobs), at n]
      (if-let [blob (first todo)]
        (let [[i k len] (when (and (vector? blob) (= 3 (count blob))) blob)
              op (when (and (vector? ops) (int? i)) (get ops i))
              slot ({"put" 1 "match" 2} (when (vector? op) (first op)))]
          (when-not (and slot (map? (get op slot)) (string? k) (nat-int? len) (<= (+ at len) size))
            (bad-request (str "a blob must be [op, key, length], naming a put's or a match's "
                              "document and lying within the body: " (pr-str blob))))
          (recur (assoc-in ops [i slot (keyword k)]
                           (String. raw (int at) (int len) StandardCharsets/UTF_8))
                 (next todo)
                 (+ at (long len))))
        (do (when-not (= at size)
              (bad-request (str (- size at) " bytes of the body follow its last blob")))
            (assoc body :tx-ops ops))))))

(defn- current-of
  "Our extension (decision 0106): the documents, as of a refused transaction, of the ids its
  `match` ops named (null for one that does not exist), `[[id, doc], ...]`: what the client reads
  again to decide anew, in the answer that tells it to."
  [node tx ops]
  (let [db (xt/db node {::xt/valid-time #inst "9999-12-31T00:00:00Z" ::xt/tx tx})]
    (into []
          (comp (filter #(and (vector? %) (= "match" (first %)) (string? (second %))))
                (map second)
                (distinct)
                (map (fn [id] [id (xt/entity db id)])))
          ops)))

(defn- writes-file?
  "Whether one of the tx-ops puts a file version (the versions feed lists it)."
  [ops]
  (some #(and (vector? %) (= "put" (first %)) (map? (second %)) (= "file" (:type (second %))))
        ops))

(defn- submit-tx [feed node ^HttpExchange ex params]
  (let [blobs (.getFirst (.getRequestHeaders ex) "X-Selfctx-Blobs")
        body (if blobs
               (blob-body (.readAllBytes (.getRequestBody ex)) blobs)
               (json-body (body-string ex)))
        ops (:tx-ops body)]
    (when-not (vector? ops) (bad-request "the body must be {\"tx-ops\": [...]}"))
    (let [tx (xt/submit-tx node (mapv json->tx-op ops))
          wait (->duration params :await-timeout)
          verdict (fn []
                    (xt/await-tx node tx wait)
                    (let [committed? (xt/tx-committed? node tx)]
                      ;; Every process's stream has been written the versions it wrote before
                      ;; its writer is told (decision 0148).
                      (when (and committed? (writes-file? ops))
                        (versions/await-pushed feed (::xt/tx-id tx)))
                      (cond-> (assoc (tx->json tx) "txCommitted?" committed?)
                        (not committed?) (assoc "current" (current-of node tx ops)))))]
      (cond
        (nil? wait) [202 (tx->json tx)]
        ;; Our extension (decision 0138): the answer in two chunks, one line each. The first once
        ;; `submit-tx` returned (the transaction is in the tx-log, synced: a node restarted after
        ;; a crash indexes it), the second once it is indexed, as the one-chunk answer below.
        (flag? params :logged) (respond-logged ex (tx->json tx) verdict)
        ;; Our extension: submit, await and tx-committed? in one round trip. Upstream ignores the
        ;; parameter and answers 202 without "txCommitted?"; the adapter then asks separately.
        :else [200 (verdict)]))))

(defn- await-tx [node _ params]
  (let [tx-id (or (->long params :tx-id) (bad-request "Missing tx-id"))]
    [200 (tx->json (xt/await-tx node {::xt/tx-id tx-id} (->duration params :timeout)))]))

(defn- tx-committed [node _ params]
  (let [tx-id (or (->long params :tx-id) (bad-request "Missing tx-id"))]
    [200 {"txCommitted?" (xt/tx-committed? node {::xt/tx-id tx-id})}]))

(defn- latest-tx [k f]
  (fn [node _ _]
    (if-let [tx (f node)]
      [200 (tx->json tx)]
      [404 {"error" (str "No " k " found.")}])))

(defn- sync-node [node _ params]
  [200 {"txTime" (xt/sync node (->duration params :timeout))}])

(def ^:private requests
  "Requests answered since the node started (the benchmarks count requests per turn)."
  (AtomicLong.))

(def ^:private warmed
  "What the warm-up did before this server started, `{:rounds n :ms t}`, or nil."
  (atom nil))

(defn- status [node _ _]
  ;; "selfctxBlobs" tells our adapter that this node reads bodies with blobs (decision 0015),
  ;; "selfctxVersions" that it answers /_xtdb/selfctx/versions (decision 0066),
  ;; "selfctxVersionDocuments" that it takes a POST there naming the files held (decision 0106),
  ;; "selfctxLogged" that `submit-tx?await-timeout=MS&logged=true` answers in two lines (0138);
  ;; "selfctxVersionStream" that it serves /_xtdb/selfctx/versions/stream (decision 0148);
  ;; "selfctxDocumentsRead" counts the documents read back from the document store, not found in
  ;; its cache (selfctx.documents, decision 0113), "selfctxDocumentsWritten" those written to it:
  ;; none that its cache held already (decision 0160); "selfctxWarmUp" what the warm-up did
  ;; before the node answered, `{"rounds", "ms"}`, null when it did not run (decision 0167).
  [200 (assoc (camel-keys (xt/status node))
              "selfctxBlobs" 1
              "selfctxVersions" 1
              "selfctxVersionDocuments" 1
              "selfctxLogged" 1
              "selfctxVersionStream" 1
              "selfctxRequests" (.get ^AtomicLong requests)
              "selfctxDocumentsRead" (.get ^AtomicLong documents/read-back)
              "selfctxDocumentsWritten" (.get ^AtomicLong documents/written)
              "selfctxWarmUp" (when-let [{:keys [rounds ms]} @warmed] {"rounds" rounds "ms" ms}))])

(defn- versions-route
  "Our extension (decision 0066): the file versions written after `after-tx-id`, from the feed
  the node keeps (`selfctx.versions`)."
  [feed]
  (fn [_ _ params]
    [200 (versions/versions-after feed (->long params :after-tx-id))]))

(defn- held-files
  "The `held` of a versions request's body: `[[id, object_hash], ...]` as a map."
  [body]
  (let [held (:held body)]
    (when-not (and (vector? held)
                   (every? #(and (vector? %) (= 2 (count %)) (every? string? %)) held))
      (bad-request "the body must be {\"held\": [[id, object_hash], ...]}"))
    (into {} held)))

(defn- versions-with-documents-route
  "Our extension (decision 0106): as `versions-route`, and the documents of the files the body
  says the client holds whose latest version it lists has another hash (`selfctx.versions`)."
  [feed]
  (fn [_ ex params]
    (let [held (held-files (json-body (body-string ex)))]
      [200 (versions/with-documents
             feed (versions/versions-after feed (->long params :after-tx-id)) held)])))

(defn- entity [node _ params]
  (let [eid (eid-of params)
        db (db-for node params)]
    (if (flag? params :history)
      (let [order (keyword (get params :sort-order "asc"))
            history (xt/entity-history db eid order
                                       {:with-docs? (flag? params :with-docs)
                                        :with-corrections? (flag? params :with-corrections)})]
        [200 (mapv camel-keys history)])
      (if-let [doc (xt/entity db eid)]
        [200 doc]
        [404 {"error" (str eid " entity not found")}]))))

(defn- namespaced-symbol
  "The first namespaced symbol in a query, if any. XTDB loads the namespace of such a symbol
  (`requiring-resolve`) before its allow-list is consulted; the adapter's queries name none."
  [q]
  (first (filter #(and (symbol? %) (namespace %))
                 (tree-seq coll? seq q))))

(defn- query [node ex params]
  (let [{q :query in-args :in-args}
        (try (c/read-edn-string-with-readers (body-string ex))
             (catch Exception e (bad-request (str "request body is not EDN: " (.getMessage e)))))]
    (when-not q (bad-request "No query provided."))
    (when-let [sym (namespaced-symbol q)]
      (bad-request (str "a query may not name a namespaced function (" sym "): only the pure "
                        "predicates of the node's :fn-allow-list are available (decision 0027)")))
    [200 (vec (apply xt/q (db-for node params) q in-args))]))

(defn- op->json
  "A tx-op of the log as `[name & args]` (`[\"put\" doc]`), the shape submit-tx takes."
  [[op & args]]
  (into [(name op)] args))

(defn- tx-log
  "Committed transactions after `after-tx-id`; with `with-ops=true` each carries its ops as
  `txOps` (documents included), and `limit=N` stops after N transactions (our extension: a
  projection catching up reads the log a page at a time instead of all of it at once)."
  [node _ params]
  (let [with-ops? (flag? params :with-ops)
        limit (->long params :limit)]
    (when (and limit (< limit 1)) (bad-request (str "limit must be at least 1: " limit)))
    (with-open [log (xt/open-tx-log node (->long params :after-tx-id) with-ops?)]
      [200 (into []
                 (comp (if limit (take limit) identity)
                       (map (fn [tx]
                              (cond-> (tx->json tx)
                                with-ops? (assoc "txOps" (mapv op->json (::xt/tx-ops tx)))))))
                 (iterator-seq log))])))

(defn- versions-stream-route
  "Our extension (decision 0148): the versions feed pushed, as lines of JSON, for as long as the
  client reads: first `{\"position\": P}` (P: the last transaction the feed has seen, null when
  none), then `{\"position\": T, \"versions\": [[T, id, object_hash], ...]}` for each later
  transaction T that wrote file versions, and `{}` every 10 s when nothing did. The lines are
  written by the feed's writer thread, not this request's (decision 0154): the exchange stays open
  once the handler returns, and is ended by the writer. At most `most` streams at once: past them
  the streams of processes that are gone are looked for (`versions/probe`), then `503` (the
  client reads every time)."
  [feed most]
  (fn [^HttpExchange ex]
    (let [out (.getResponseBody ex)
          close (fn [] (.close ex))
          s (or (versions/subscribe feed most out close)
                (do (versions/probe feed)
                    (versions/subscribe feed most out close)))]
      (if s
        (try
          (doto (.getResponseHeaders ex)
            (.set "Content-Type" "application/x-ndjson; charset=utf-8"))
          (.sendResponseHeaders ex 200 0)
          (versions/hand-over feed s)
          (catch java.io.IOException _
            (versions/unsubscribe feed s)
            (.close ex)))
        (try
          (respond ex 503 {"error" (str "this node serves " most " streams of the versions feed at most")})
          (finally (.close ex)))))))

(def ^:private routes
  {   ["GET" "/_xtdb/await-tx"] await-tx
   ["GET" "/_xtdb/tx-committed"] tx-committed
   ["GET" "/_xtdb/latest-completed-tx"] (latest-tx "latest-completed-tx" xt/latest-completed-tx)
   ["GET" "/_xtdb/latest-submitted-tx"] (latest-tx "latest-submitted-tx" xt/latest-submitted-tx)
   ["GET" "/_xtdb/sync"] sync-node
   ["GET" "/_xtdb/status"] status
   ["GET" "/_xtdb/entity"] entity
   ["POST" "/_xtdb/query"] query
   ["GET" "/_xtdb/tx-log"] tx-log})

(defn- handle [node routes ^bytes expected ^HttpExchange ex]
  (.incrementAndGet ^AtomicLong requests)
  (try
    (let [path (.getPath (.getRequestURI ex))
          handler (get routes [(.getRequestMethod ex) path])
          refused (guard/refusal ex expected path)
          [status body] (cond
                          refused
                          (let [[s message] refused]
                            (when (= 401 s)
                              (.set (.getResponseHeaders ex) "WWW-Authenticate" "Bearer"))
                            [s {"error" message}])
                          handler
                          (try
                            (handler node ex (query-params ex))
                            (catch clojure.lang.ExceptionInfo e
                              (if-let [s (::status (ex-data e))]
                                [s {"error" (ex-message e)}]
                                (throw e)))
                            ;; Upstream answers these with 400 and the exception's data.
                            (catch xtdb.IllegalArgumentException e [400 (error-body e)])
                            (catch NodeOutOfSyncException e [400 (error-body e)])
                            (catch TimeoutException e
                              [500 (assoc (error-body e) "type" "exception")]))
                          :else
                          [404 {"error" (str "no route " (.getRequestMethod ex) " " path)}])]
      (when-not (= status responded) (respond ex status body)))
    (catch Throwable e
      (log/warn e "request failed:" (str (.getRequestURI ex)))
      (try (respond ex 500 (assoc (error-body e) "type" "exception"))
           (catch Throwable _ nil)))
    (finally
      (.close ex))))

(def ^:private stream-path "/_xtdb/selfctx/versions/stream")

(defn- stream-handler
  "The handler of the stream's path: the stream, its exchange left open, when the request is
  `GET` of exactly that path and `guard/refusal` lets it in; anything else is `handle`d."
  [node routes ^bytes expected stream]
  (reify HttpHandler
    (handle [_ ex]
      (let [path (.getPath (.getRequestURI ex))]
        (if (and (= "GET" (.getRequestMethod ex)) (= stream-path path)
                 (nil? (guard/refusal ex expected path)))
          (do (.incrementAndGet ^AtomicLong requests)
              (try (stream ex)
                   (catch Throwable e
                     (log/warn e "the versions stream failed")
                     (.close ex))))
          (handle node routes expected ex))))))

;; ---- the module ----------------------------------------------------------------------------

(defrecord SelfctxHttpServer [^HttpServer server ^ExecutorService pool ^Closeable feed]
  Closeable
  (close [_]
    (.stop server 0)
    (.shutdownNow pool)
    (.close feed)))

(defn- start
  "The server on `host`:`port` (0: an ephemeral one) in front of `xtdb-node`, letting in the
  requests whose `Authorization` header is `expected`; `:port` is the one it listens on. With
  `:thread-name` its request threads are named `<thread-name>-N` (the warm-up's), else the
  JDK's `pool-N-thread-M` (the node's own: `selfctx bench proxy` groups its threads by name)."
  [xtdb-node {:keys [port host threads streams versions thread-name]} ^bytes expected]
  (let [feed (versions/->feed xtdb-node versions write-json)
        routes (assoc routes
                      ["POST" "/_xtdb/submit-tx"] (fn [node ex params] (submit-tx feed node ex params))
                      ["GET" "/_xtdb/selfctx/versions"] (versions-route feed)
                      ["POST" "/_xtdb/selfctx/versions"] (versions-with-documents-route feed))
        ;; Awaits block a thread each, so the pool is larger than the core count.
        ;; A stream holds a connection, not a thread (decision 0154).
        pool (if thread-name
               (let [n (AtomicLong.)]
                 (Executors/newFixedThreadPool
                  (int threads)
                  (reify ThreadFactory
                    (newThread [_ r]
                      (doto (Thread. r (str thread-name "-" (.incrementAndGet n)))
                        (.setDaemon true))))))
               (Executors/newFixedThreadPool (int threads)))
        server (HttpServer/create (InetSocketAddress. ^String host (int port)) 128)]
    (.createContext server "/" (reify HttpHandler
                                 (handle [_ ex] (handle xtdb-node routes expected ex))))
    (.createContext server ^String stream-path
                    (stream-handler xtdb-node routes expected
                                    (versions-stream-route feed streams)))
    (.setExecutor server pool)
    (.start server)
    (assoc (->SelfctxHttpServer server pool feed) :port (.getPort (.getAddress server)))))

(def ^:private warm-up-property
  "The JVM system property of the warm-up's milliseconds (decision 0167); absent: none."
  "selfctx.warm-up-ms")

(defn ->server
  "XTDB module: `{:selfctx.http-server/server {:port 3000 :host \"127.0.0.1\" :secret-file
  \"...\"}}` in a node's EDN config starts this server next to the node. With the JVM property
  `selfctx.warm-up-ms` above 0, the JVM first runs the request path on a scratch node of its own
  (`selfctx.warm-up`, decision 0167) for that long at most, and answers nothing meanwhile."
  {::sys/deps {:xtdb-node :xtdb/node}
   ::sys/args {:port {:spec ::sys/nat-int :doc "Port to listen on" :default 3000}
               :host {:spec ::sys/string :doc "Address to bind" :default "127.0.0.1"}
               :threads {:spec ::sys/pos-int :doc "Request threads" :default 32}
               :streams {:spec ::sys/pos-int
                         :doc "Streams of the versions feed served at once (decision 0154)"
                         :default 256}
               :versions {:spec ::sys/pos-int
                          :doc "File versions the versions feed keeps (decision 0066)"
                          :default 100000}
               :secret-file {:spec ::sys/string
                             :doc "File holding the secret every request must carry"}}}
  [{:keys [xtdb-node host secret-file] :as opts}]
  ;; Headers and body go out in separate writes: without TCP_NODELAY each answer waits ~40 ms
  ;; for the client's delayed ACK. Read once, when the JDK's server classes first load.
  (when-not (System/getProperty "sun.net.httpserver.nodelay")
    (System/setProperty "sun.net.httpserver.nodelay" "true"))
  (let [expected (guard/read-secret secret-file)
        ms (let [v (some-> (System/getProperty warm-up-property) str/trim)]
             (try (if (seq v) (Long/parseLong v) 0)
                  (catch NumberFormatException _
                    (throw (IllegalArgumentException.
                            (str warm-up-property " must be a whole number of milliseconds: " v))))))]
    (when (pos? ms)
      (reset! warmed (warm-up/run ms (fn [node scratch-expected]
                                       (start node (assoc opts :port 0 :host "127.0.0.1"
                                                          :thread-name "selfctx-warm-up-http")
                                              scratch-expected))))
      ;; The scratch server's requests were not this node's.
      (.set ^AtomicLong requests 0))
    (let [server (start xtdb-node opts expected)]
      (log/info "HTTP server started on port: " (:port server) "host:" host)
      server)))
