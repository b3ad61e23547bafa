# cmake -DBUILD_DIR=<build tree> -P check_layer_rule.cmake
# Builds the probes of tests/layers/CMakeLists.txt: each allowed include must
# compile; each include that breaks the layer rule must fail on its header.
function(build_probe target result_var output_var)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${target}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  set(${result_var} ${result} PARENT_SCOPE)
  set(${output_var} "${output}" PARENT_SCOPE)
endfunction()

foreach(probe IN ITEMS "layer_probe_downward|reprise/comm.hpp"
                       "layer_probe_detail_downward|reprise/detail/comm_internals.hpp")
  string(REPLACE "|" ";" probe "${probe}")
  list(GET probe 0 target)
  list(GET probe 1 header)
  build_probe(${target} result output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "a store source including ${header} (allowed) did not build:\n${output}")
  endif()
endforeach()
foreach(probe IN ITEMS "layer_probe_upward|reprise/checkpoint.hpp" "layer_probe_internal_below|ulfm.hpp"
                       "layer_probe_detail_upward|reprise/detail/checkpoint_internals.hpp")
  string(REPLACE "|" ";" probe "${probe}")
  list(GET probe 0 target)
  list(GET probe 1 header)
  build_probe(${target} result output)
  if(result EQUAL 0)
    message(FATAL_ERROR "${target} built, but its include of ${header} breaks the layer rule")
  endif()
  if(NOT output MATCHES "${header}: No such file or directory")
    message(FATAL_ERROR "${target} failed, but not for want of ${header}:\n${output}")
  endif()
  message(STATUS "${target}: refused as it must be (${header} not visible)")
endforeach()
