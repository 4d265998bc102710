(ns selfctx.json
  "Reading the JSON bodies of the node's write routes (`submit-tx`, the versions feed's POST).

  What `clojure.data.json/read-str` with `:key-fn keyword` gives, value for value: objects as
  maps built by `assoc!` on `(transient {})` in the order of their keys (a repeated key: the last
  wins), arrays as vectors, keys as keywords, integers as Long (BigInt past Long's range),
  numbers with a fraction or an exponent as Double, strings with their escapes decoded and
  anything else in them kept as it is (an unpaired surrogate, a control character). It reads the
  body's String in place through a primitive index, where data.json calls a pushback reader once
  a character and fills a StringBuilder for every number: reading was a fifth of the request
  threads' CPU in a proxied request's commit (decision 0108).

  Stricter than data.json where the input is not JSON: anything but white space after the value
  (data.json ignores it) and a `\\u` escape of other than four hex digits (data.json's
  `Integer/parseInt` takes a sign) are refused. Every refusal is an `ex-info`; the routes answer
  it with a 400.")

(set! *warn-on-reflection* true)

(defn- fail [what ^long at]
  (throw (ex-info (str "JSON error (" what ") at character " at) {::at at})))

(defn- digit? [^long c] (and (>= c 48) (<= c 57)))

(defn- hex-digit ^long [^long c ^long at]
  (cond
    (and (>= c 48) (<= c 57)) (- c 48)
    (and (>= c 97) (<= c 102)) (- c 87)
    (and (>= c 65) (<= c 70)) (- c 55)
    :else (fail "invalid \\u escape" at)))

(defn- integer
  "As data.json: Long, or BigInt past Long's range."
  [^String digits]
  (if (< (.length digits) 18)
    (Long/valueOf digits)
    (try (Long/valueOf digits)
         (catch NumberFormatException _ (bigint digits)))))

(definterface Reader
  (^Object value [])
  (^void finish [])
  (^long skip [])
  (^Object string [])
  (^Object object [])
  (^Object array [])
  (^Object number [])
  (^Object literal [^String word value]))

(deftype StringReader [^String s ^long n ^:unsynchronized-mutable ^long i]
  Reader
  (skip [_]
    ;; The next character that is not JSON white space (-1 at the end), left unread.
    (loop [j i]
      (if (< j n)
        (let [c (int (.charAt s j))]
          (if (or (== c 32) (== c 10) (== c 13) (== c 9))
            (recur (inc j))
            (do (set! i j) c)))
        (do (set! i j) -1))))

  (finish [this]
    (when-not (neg? (.skip this)) (fail "data after the value" i)))

  (value [this]
    (let [c (.skip this)]
      (cond
        (== c 34) (do (set! i (inc i)) (.string this))
        (== c 123) (do (set! i (inc i)) (.object this))
        (== c 91) (do (set! i (inc i)) (.array this))
        (or (== c 45) (digit? c)) (.number this)
        (== c 116) (.literal this "true" true)
        (== c 102) (.literal this "false" false)
        (== c 110) (.literal this "null" nil)
        (neg? c) (fail "end of input" i)
        :else (fail (str "unexpected character " (pr-str (char c))) i))))

  (literal [_ word v]
    (if (.startsWith s word i)
      (do (set! i (+ i (.length word))) v)
      (fail (str "expected " word) i)))

  (string [_]
    ;; After the opening quote. Runs without escapes are copied whole.
    (let [start i
          plain-end (long (loop [j start]
                      (if (< j n)
                        (let [c (int (.charAt s j))]
                          (if (or (== c 34) (== c 92)) j (recur (inc j))))
                        (fail "end of input inside a string" start))))]
      (if (== 34 (int (.charAt s plain-end)))
        (do (set! i (inc plain-end)) (.substring s start plain-end))
        (let [out (StringBuilder. (int (+ 16 (- plain-end start))))]
          (.append out s (int start) (int plain-end))
          (loop [j plain-end run j]
            (when-not (< j n) (fail "end of input inside a string" start))
            (let [c (int (.charAt s j))]
              (cond
                (== c 34) (do (.append out s (int run) (int j))
                             (set! i (inc j))
                             (.toString out))
                (== c 92) (let [_ (.append out s (int run) (int j))
                               k (inc j)
                               _ (when-not (< k n) (fail "end of input inside an escape" j))
                               e (.charAt s k)]
                           (case e
                             (\" \\ \/) (do (.append out e) (recur (+ k 1) (+ k 1)))
                             \b (do (.append out \backspace) (recur (+ k 1) (+ k 1)))
                             \f (do (.append out \formfeed) (recur (+ k 1) (+ k 1)))
                             \n (do (.append out \newline) (recur (+ k 1) (+ k 1)))
                             \r (do (.append out \return) (recur (+ k 1) (+ k 1)))
                             \t (do (.append out \tab) (recur (+ k 1) (+ k 1)))
                             \u (do (when-not (<= (+ k 5) n)
                                      (fail "end of input inside a \\u escape" j))
                                    (.append out (char (+ (bit-shift-left (hex-digit (int (.charAt s (+ k 1))) k) 12)
                                                          (bit-shift-left (hex-digit (int (.charAt s (+ k 2))) k) 8)
                                                          (bit-shift-left (hex-digit (int (.charAt s (+ k 3))) k) 4)
                                                          (hex-digit (int (.charAt s (+ k 4))) k))))
                                    (recur (+ k 5) (+ k 5)))
                             (fail (str "invalid escape " (pr-str (str "\\" e))) j)))
                :else (recur (inc j) run))))))))

  (number [_]
    ;; data.json's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, then white space,
    ;; `,`, `]`, `}` or the end.
    (let [start i
          digits (fn ^long [^long j]
                   (loop [j j] (if (and (< j n) (digit? (int (.charAt s j)))) (recur (inc j)) j)))
          at (fn ^long [^long j] (if (< j n) (int (.charAt s j)) -1))
          j (if (== 45 (at start)) (inc start) start)
          j (cond
              (== 48 (at j)) (inc j)
              (digit? (at j)) (digits (inc j))
              :else (fail "invalid number" start))
          [j decimal?] (if (== 46 (at j))
                         (let [k (digits (inc j))]
                           (if (== k (inc j)) (fail "invalid number" start) [k true]))
                         [j false])
          j (long j)
          [j decimal?] (if (or (== 101 (at j)) (== 69 (at j)))
                         (let [k (if (or (== 43 (at (inc j))) (== 45 (at (inc j)))) (+ j 2) (inc j))
                               m (digits k)]
                           (if (== m k) (fail "invalid number" start) [m true]))
                         [j decimal?])
          j (long j)
          c (at j)]
      (when-not (or (== c -1) (== c 32) (== c 10) (== c 13) (== c 9)
                    (== c 44) (== c 93) (== c 125))
        (fail "invalid number" start))
      (set! i j)
      (let [text (.substring s start j)]
        (if decimal? (Double/valueOf text) (integer text)))))

  (array [this]
    ;; After the opening bracket.
    (if (== 93 (.skip this))
      (do (set! i (inc i)) [])
      (loop [out (transient [])]
        (let [out (conj! out (.value this))
              c (.skip this)]
          (set! i (inc i))
          (cond
            (== c 44) (recur out)
            (== c 93) (persistent! out)
            (neg? c) (fail "end of input in an array" (dec i))
            :else (fail "expected , or ] in an array" (dec i)))))))

  (object [this]
    ;; After the opening brace.
    (if (== 125 (.skip this))
      (do (set! i (inc i)) {})
      (loop [out (transient {})]
        (let [c (.skip this)]
          (when-not (== 34 c)
            (fail (if (neg? c) "end of input in an object" "expected a string key in an object") i)))
        (set! i (inc i))
        (let [k (keyword (.string this))]
          (let [c (.skip this)]
            (when-not (== 58 c)
              (fail (if (neg? c) "end of input in an object" "expected : in an object") i)))
          (set! i (inc i))
          (let [out (assoc! out k (.value this))
                c (.skip this)]
            (set! i (inc i))
            (cond
              (== c 44) (recur out)
              (== c 125) (persistent! out)
              (neg? c) (fail "end of input in an object" (dec i))
              :else (fail "expected , or } in an object" (dec i)))))))))

(defn read-str
  "The one JSON value `s` holds, keys as keywords (see the namespace's doc)."
  [^String s]
  (let [r (StringReader. s (.length s) 0)
        v (.value r)]
    (.finish r)
    v))
