;; The fixed kernel of kube32.io/interp-mops (seed, "Policies": each node reports its interpreter
;; speed at boot, measured on a fixed kernel). A loop whose body is a mix of what pods do: integer
;; arithmetic, loads and stores to linear memory, compares and branches. Every iteration executes
;; exactly 24 WebAssembly instructions (counted below, the loop's own br_if included), so
;; iterations × 24 / seconds / 1e6 is millions of WebAssembly operations per second.
;; Built into build/interp-mops.wasm by scripts/build-examples.sh (wat2wasm). Do not change it:
;; a change makes the numbers of old and new nodes incomparable.
(module
  (memory (export "memory") 1)
  (global (export "ops_per_iteration") i32 (i32.const 24))
  (func (export "run") (param $n i32) (result i32)
    (local $i i32) (local $x i32) (local $acc i32)
    (local.set $x (i32.const 12345))
    (loop $body
      ;; x = x * 1103515245 + 12345                         5: local.get i32.const i32.mul i32.const i32.add
      ;;                                                    +1: local.set                       = 6
      (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1103515245)) (i32.const 12345)))
      ;; mem[(x >> 16) & 1020] = acc                        local.get i32.const i32.shr_u i32.const i32.and local.get i32.store = 7 (13)
      (i32.store (i32.and (i32.shr_u (local.get $x) (i32.const 16)) (i32.const 1020)) (local.get $acc))
      ;; acc = acc ^ x                                      local.get local.get i32.xor local.set = 4 (17)
      (local.set $acc (i32.xor (local.get $acc) (local.get $x)))
      ;; i = i + 1                                          local.get i32.const i32.add local.tee = 4 (21)
      ;; br_if body (i < n)                                 local.get i32.lt_u br_if = 3 (24)
      (br_if $body (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (local.get $n))))
    (local.get $acc))
)
