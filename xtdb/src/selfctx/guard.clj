(ns selfctx.guard
  "Who may ask the node anything (decision 0027): the secret every request carries, and the
  requests a web page could make, which are refused whatever they carry. The HTTP front
  (`selfctx.http-server`) asks `refusal` before any route sees a request."
  (:require [clojure.string :as str])
  (:import [com.sun.net.httpserver HttpExchange]
           [java.nio.charset StandardCharsets]
           [java.nio.file Files LinkOption Paths]
           [java.nio.file.attribute PosixFilePermission]
           [java.security MessageDigest]))

(def ^:private body-types
  "The one content type each POST route reads. Anything else, `text/plain` and forms above all
  (what a web page may send without asking), is refused."
  {"/_xtdb/submit-tx" "application/json"
   "/_xtdb/query" "application/edn"
   "/_xtdb/selfctx/versions" "application/json"})

(defn read-secret
  "The secret in `file`: it must be the owner's alone and long enough to be unguessable."
  ^bytes [^String file]
  (when-not file
    (throw (IllegalArgumentException. "the HTTP server needs :secret-file (decision 0027)")))
  (let [path (Paths/get file (make-array String 0))
        mode (Files/getPosixFilePermissions path (make-array LinkOption 0))
        secret (str/trim (slurp file))]
    (when-not (every? #{PosixFilePermission/OWNER_READ PosixFilePermission/OWNER_WRITE} mode)
      (throw (IllegalArgumentException. (str file " may be read by others: it must be 0600"))))
    (when (< (count secret) 32)
      (throw (IllegalArgumentException. (str file " holds no secret of 32 characters or more"))))
    (.getBytes (str "Bearer " secret) StandardCharsets/UTF_8)))

(defn- header ^String [^HttpExchange ex ^String k]
  (.getFirst (.getRequestHeaders ex) k))

(defn- same-secret?
  "Constant time, so that the answer's timing does not tell how much of a guess was right."
  [^bytes expected ^String given]
  (and given (MessageDigest/isEqual expected (.getBytes given StandardCharsets/UTF_8))))

(defn- media-type
  "The part of a Content-Type before its first `;` (nil when it is all `;`), as
  `(first (str/split value #\";\"))` gives, without a regular expression for a value that has
  no parameters."
  [^String value]
  (if (neg? (.indexOf value ";"))
    value
    (first (str/split value #";"))))

(defn refusal
  "Why a request is refused before any route sees it, as [status message], or nil. Never names
  the secret, or what was sent in its place."
  [^HttpExchange ex ^bytes expected path]
  (let [site (header ex "Sec-Fetch-Site")
        wanted (get body-types path)
        ;; Only a POST to a route that reads a body looks at its type (decision 0151).
        media (when (and wanted (= "POST" (.getRequestMethod ex)))
                (some-> (header ex "Content-Type") media-type str/trim str/lower-case))]
    (cond
      (header ex "Origin")
      [403 "requests from web pages are refused (the request has an Origin header)"]
      (and site (not= "none" (str/lower-case site)))
      [403 (str "requests from web pages are refused (Sec-Fetch-Site: " site ")")]
      (not (same-secret? expected (header ex "Authorization")))
      [401 (str "this node needs its secret: send \"Authorization: Bearer <secret>\", the "
                "secret being the content of the key file its launcher wrote (docs/xtdb.md)")]
      (and wanted (= "POST" (.getRequestMethod ex)) (not= wanted media))
      [415 (str path " reads " wanted ", not " (or media "a body without a Content-Type"))])))
