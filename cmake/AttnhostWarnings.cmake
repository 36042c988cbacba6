# Warnings for every target of the project; fatal with ATTNHOST_WERROR (CI).
function(attnhost_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wshadow -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${ATTNHOST_WERROR}>>:-Werror>)
endfunction()
