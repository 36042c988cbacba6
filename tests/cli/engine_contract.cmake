# The CLI side of the engine contract (issue 23), over the host-memory test
# plugins: explain prints the whole table before the error when a layer
# cannot be served; bind warns of (or, under fallback = error, refuses) a
# CPU fallback; run --plugin forces the plugin; --version asks the library.
# -DAH=<attnhost> -DFAKE=<fake_cuda_plugins dir> -DGOOD=<abi good dir> -DSRC=<tests/cli>
set(COMMON --no-cache --plugin-dir ${FAKE} --plugin-dir ${GOOD})

function(run_ah out_rc out_text)
  execute_process(COMMAND ${AH} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${o}${e}" PARENT_SCOPE)
endfunction()

function(expect text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: output lacks '${needle}':\n${text}")
  endif()
endfunction()

# 4. explain with a layer the forced backend cannot serve: the table, then the error
run_ah(rc out explain ${COMMON} --plugin fake_cuda_dev --model ${SRC}/contract_model.ini)
if(rc EQUAL 0)
  message(FATAL_ERROR "explain on an unservable layer exited 0:\n${out}")
endif()
expect("${out}" "layer 0 prefill: fake_cuda_dev" "explain")
expect("${out}" "layer 1 prefill: NONE (no backend can serve it)" "explain")
expect("${out}" "head_size: qk_head_size = 80; supported: {64, 128}" "explain")
expect("${out}" "layer 1 decode: NONE" "explain")
expect("${out}" "attnhost: layer 1 (prefill): the forced backend cannot serve it" "explain")

# 3. a CPU fallback: bind warns, naming the layer and the GPU backend's reasons
file(WRITE ${WORK}/warn.ini "[select]\npriority = fake_cuda_dev, abi_good\n")
run_ah(rc out bind ${COMMON} --config ${WORK}/warn.ini --model ${SRC}/contract_model.ini)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bind with a CPU fallback failed:\n${out}")
endif()
expect("${out}" "warning: layer 1 (prefill): fell back to the CPU backend abi_good although a GPU backend is available; the GPU backends refused it: fake_cuda_dev: qk_head_size = 80" "bind")
file(WRITE ${WORK}/error.ini "[select]\npriority = fake_cuda_dev, abi_good\nfallback = error\n")
run_ah(rc out bind ${COMMON} --config ${WORK}/error.ini --model ${SRC}/contract_model.ini)
if(rc EQUAL 0)
  message(FATAL_ERROR "bind with fallback = error accepted a CPU fallback:\n${out}")
endif()
expect("${out}" "layer 1 (prefill): only the CPU backend abi_good can serve it and [select] fallback = error" "bind")
run_ah(rc out explain ${COMMON} --config ${WORK}/error.ini --model ${SRC}/contract_model.ini)
expect("${out}" "layer 1 prefill: abi_good" "explain (fallback = error)")
expect("${out}" "only the CPU backend abi_good can serve it" "explain (fallback = error)")

# 5. run --plugin forces the plugin (the default order would take cpu_amx or abi_good)
run_ah(rc out run ${COMMON} --plugin fake_cuda_dev --model ${SRC}/contract_model_64.ini --steps 1)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "run --plugin fake_cuda_dev failed:\n${out}")
endif()
if(NOT out MATCHES "\n1 +fake_cuda_dev +fake_cuda_dev ")
  message(FATAL_ERROR "run --plugin fake_cuda_dev did not bind it:\n${out}")
endif()
expect("${out}" "PASS: every layer" "run --plugin")
run_ah(rc out run ${COMMON} --plugin no_such_plugin --model ${SRC}/contract_model_64.ini --steps 1)
if(rc EQUAL 0)
  message(FATAL_ERROR "run --plugin no_such_plugin exited 0:\n${out}")
endif()

# 8. --version: the library's version and ABI
run_ah(rc out --version)
if(NOT out MATCHES "^attnhost [0-9]+\\.[0-9]+\\.[0-9]+ \\(plugin ABI 2\\.[0-9]+\\)\n$")
  message(FATAL_ERROR "--version: '${out}'")
endif()
