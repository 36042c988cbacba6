# Every example model binds on this machine (with fallback allowed).
file(GLOB models ${MODELS}/*.ini)
foreach(m IN LISTS models)
  execute_process(COMMAND ${AH} bind --no-cache --model ${m} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "attnhost bind --model ${m} failed:\n${out}${err}")
  endif()
endforeach()
