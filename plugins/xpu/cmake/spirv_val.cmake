# cmake -P spirv_val.cmake: spirv-val (VAL) on every SPIR-V module (SPV).
string(REPLACE "|" ";" SPV "${SPV}")
foreach(f ${SPV})
  execute_process(COMMAND ${VAL} ${f} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE o)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "spirv-val ${f}: ${o}")
  endif()
  message(STATUS "spirv-val ${f}: valid")
endforeach()
