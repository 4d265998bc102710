;; Ahead-of-time compile XTDB's namespaces into the folder named by -Dclojure.compile.path.
;;
;; The xtdb-core jar ships Clojure sources with only xtdb.main compiled, so every node start
;; would compile the whole database from source (15-30 s on a small machine). Compiling once,
;; right after the jars are fetched, brings a start down to a few seconds. Clojure loads a
;; compiled class only when it is newer than its source, so stale classes are never used.
;;
;; Usage: java -cp "lib/*:classes" -Dclojure.compile.path=classes clojure.main aot.clj lib
;; Namespaces that need optional libraries we do not ship (metrics, H2, Oracle...) fail to
;; load; they are listed and skipped, which is expected.
(import '[java.util.zip ZipFile])

(def lib-dir (first *command-line-args*))

(def namespaces
  (for [jar (.listFiles (java.io.File. ^String lib-dir))
        :when (re-find #"^xtdb-(core|rocksdb|jdbc)-" (.getName jar))
        entry (with-open [zip (ZipFile. jar)] (doall (enumeration-seq (.entries zip))))
        :let [path (.getName entry)]
        :when (re-matches #"xtdb/.*\.clj" path)]
    (-> path (subs 0 (- (count path) 4)) (.replace "/" ".") (.replace "_" "-") symbol)))

(def skipped (atom []))

(doseq [ns-sym (sort namespaces)]
  ;; A namespace loaded as a dependency of an earlier one has been compiled already.
  (when-not (contains? (loaded-libs) ns-sym)
    (try (compile ns-sym)
         (catch Throwable t (swap! skipped conj ns-sym)))))

(println "compiled" (- (count namespaces) (count @skipped)) "namespaces; skipped" @skipped)
(shutdown-agents)
