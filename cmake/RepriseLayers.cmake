# The layer rule, enforced by the build: a layer of src/ may use the layers
# below it and nothing else. Each layer is an object library that sees only
#   - its own folder (its internal headers),
#   - src/base (header-only helpers every layer may use),
#   - the public headers of its own layer and of the layers below: each layer
#     gets a folder of links to its headers (build/<preset>/layers/<layer>/reprise/),
#     and only those folders are on its include path, never include/ itself.
#   - the detail headers of the layers below: headers of a layer's folder
#     that the layers above build on but users never call (comm's handover,
#     the checkpoint's view of its registrations), linked as
#     build/<preset>/layers/<layer>-detail/reprise/detail/<header>.
# So a source of `store` that includes "reprise/checkpoint.hpp" or comm's
# "ulfm.hpp" does not compile. The library users link (reprise) is made from
# the layers' object files and sees every public header, and no detail
# header: those are not installed, and a public header that includes one
# does not compile in tests/headers. Code inside the build that builds on
# the layers (tests, tools, benchmarks, the Python module) links
# reprise_detail for every detail header.

# reprise_add_layer(<name> [BELOW <layer>] HEADERS <public headers...> [DETAIL <headers...>]
#                   SOURCES <files...>)
# Object library reprise_<name> from src/<name>/<files>, owning the public
# headers include/reprise/<headers> (or, for generated ones, the same path
# under the build tree) and the detail headers src/<name>/<DETAIL headers>
# (included as "reprise/detail/<header>"). With BELOW, it uses <layer> and
# what that uses.
function(reprise_add_layer name)
  cmake_parse_arguments(ARG "" "BELOW" "HEADERS;DETAIL;SOURCES" ${ARGN})
  set(view ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/reprise)
  set(detail_view ${PROJECT_BINARY_DIR}/layers/${name}-detail)
  file(REMOVE_RECURSE ${detail_view})
  file(MAKE_DIRECTORY ${detail_view}/reprise/detail)
  foreach(header IN LISTS ARG_DETAIL)
    set(source ${CMAKE_CURRENT_SOURCE_DIR}/${name}/${header})
    if(NOT EXISTS ${source})
      message(FATAL_ERROR "reprise: layer ${name} lists the detail header ${header}, which is not in src/${name}/")
    endif()
    file(CREATE_LINK ${source} ${detail_view}/reprise/detail/${header} SYMBOLIC)
  endforeach()
  if(NOT TARGET reprise_detail)
    add_library(reprise_detail INTERFACE)
  endif()
  target_include_directories(reprise_detail INTERFACE ${detail_view})
  foreach(header IN LISTS ARG_HEADERS)
    set(source ${PROJECT_SOURCE_DIR}/include/reprise/${header})
    if(NOT EXISTS ${source})
      set(source ${PROJECT_BINARY_DIR}/include/reprise/${header})
    endif()
    if(NOT EXISTS ${source})
      message(FATAL_ERROR "reprise: layer ${name} lists the header ${header}, which is not in include/reprise/")
    endif()
    file(CREATE_LINK ${source} ${view}/reprise/${header} SYMBOLIC)
  endforeach()
  set_property(GLOBAL APPEND PROPERTY REPRISE_LAYER_HEADERS ${ARG_HEADERS})

  list(TRANSFORM ARG_SOURCES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/${name}/)
  add_library(reprise_${name} OBJECT ${ARG_SOURCES})
  target_include_directories(reprise_${name} PUBLIC ${view} ${detail_view} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/${name})
  if(ARG_BELOW)
    target_link_libraries(reprise_${name} PUBLIC reprise_${ARG_BELOW})
  else()
    target_link_libraries(reprise_${name} PUBLIC reprise_base MPI::MPI_CXX Threads::Threads)
  endif()
  target_link_libraries(reprise_${name} PRIVATE reprise_xxhash)
  target_compile_features(reprise_${name} PUBLIC cxx_std_20)
  set_target_properties(reprise_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  reprise_set_warnings(reprise_${name})
endfunction()

# reprise_check_layer_headers(): every public header belongs to one layer
# (the umbrella header reprise.hpp sits above them all).
function(reprise_check_layer_headers)
  get_property(owned GLOBAL PROPERTY REPRISE_LAYER_HEADERS)
  file(GLOB headers RELATIVE ${PROJECT_SOURCE_DIR}/include/reprise ${PROJECT_SOURCE_DIR}/include/reprise/*)
  foreach(header IN LISTS headers)
    if(NOT header STREQUAL "reprise.hpp" AND NOT header IN_LIST owned)
      message(FATAL_ERROR "reprise: include/reprise/${header} belongs to no layer: add it to the HEADERS of "
                          "its layer in src/CMakeLists.txt")
    endif()
  endforeach()
endfunction()
