# The order in which the project's LibTorch executables load their shared libraries.
#
# A LibTorch process loads about 340 libraries, and the dynamic loader searched them 17 million
# times to bind their symbols: a quarter of the 0.37 s of CPU each process start cost, paid by
# every worker, test process and tool run (docs/design.md, "The order the libraries load in").
# cmake/library_order.py lists the libraries that define the most symbols first, keeping every
# symbol that any of its definers defines strongly bound where the natural order binds it, and
# each executable linked with dist names that list before its own objects.
#
# The list comes from dist-train linked without it (dist-train-natural-order, tools/, whose
# load order is the one to keep), as build/library_order.rsp. Executables of the build tree
# only: a user's executable, linked with the installed package, keeps the linker's own order.
#
#   -DDIST_ORDER_LIBRARIES=OFF links every executable in the linker's own order.
option(DIST_ORDER_LIBRARIES "List LibTorch's shared libraries in the order that starts fastest" ON)
# TRUE when the order is made: asked for, and python3, ldd and readelf are there.
set(DIST_ORDERING_LIBRARIES FALSE)
if(DIST_ORDER_LIBRARIES)
  find_package(Python3 COMPONENTS Interpreter)
  find_program(DIST_LDD ldd)
  find_program(DIST_READELF readelf)
  if(Python3_Interpreter_FOUND AND DIST_LDD AND DIST_READELF)
    set(DIST_ORDERING_LIBRARIES TRUE)
  else()
    message(STATUS "distribute: executables load libraries in the linker's order (ordering "
                   "them needs python3, ldd and readelf)")
  endif()
else()
  message(STATUS "distribute: executables load libraries in the linker's order "
                 "(DIST_ORDER_LIBRARIES=OFF)")
endif()

# The executables of DIRECTORY and the folders under it, in VAR.
function(_dist_executables_under directory var)
  get_property(targets DIRECTORY ${directory} PROPERTY BUILDSYSTEM_TARGETS)
  set(found)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      list(APPEND found ${target})
    endif()
  endforeach()
  get_property(folders DIRECTORY ${directory} PROPERTY SUBDIRECTORIES)
  foreach(folder IN LISTS folders)
    _dist_executables_under(${folder} below)
    list(APPEND found ${below})
  endforeach()
  set(${var} ${found} PARENT_SCOPE)
endfunction()

# TRUE in VAR when TARGET links dist, directly or through a library of this project (at most
# DEPTH libraries deep: static libraries may link each other in a circle).
function(_dist_links_dist target var depth)
  set(${var} FALSE PARENT_SCOPE)
  if(depth LESS_EQUAL 0)
    return()
  endif()
  math(EXPR deeper "${depth} - 1")
  get_target_property(libraries ${target} LINK_LIBRARIES)
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  foreach(library IN LISTS libraries interface)
    if(library STREQUAL "dist")
      set(${var} TRUE PARENT_SCOPE)
      return()
    endif()
    if(TARGET ${library} AND NOT library MATCHES "::")
      get_target_property(imported ${library} IMPORTED)
      if(NOT imported)
        _dist_links_dist(${library} through ${deeper})
        if(through)
          set(${var} TRUE PARENT_SCOPE)
          return()
        endif()
      endif()
    endif()
  endforeach()
endfunction()

# Called once every executable is defined (the end of the top CMakeLists.txt); tools/ defines
# dist-train-natural-order when DIST_ORDERING_LIBRARIES.
function(dist_order_libraries)
  if(NOT DIST_ORDERING_LIBRARIES)
    return()
  endif()
  set(rsp ${PROJECT_BINARY_DIR}/library_order.rsp)
  add_custom_command(
    OUTPUT ${rsp}
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/library_order.py
            $<TARGET_FILE:dist-train-natural-order> ${rsp}
    DEPENDS dist-train-natural-order ${PROJECT_SOURCE_DIR}/cmake/library_order.py
    COMMENT "library_order.py: the order dist's executables load their libraries in")
  add_custom_target(dist_library_order DEPENDS ${rsp})
  _dist_executables_under(${PROJECT_SOURCE_DIR} executables)
  set(ordered 0)
  foreach(executable IN LISTS executables)
    if(executable STREQUAL "dist-train-natural-order")
      continue()
    endif()
    _dist_links_dist(${executable} links 8)
    if(NOT links)
      continue()  # dist-launch, dist-store-host: no LibTorch, a handful of libraries
    endif()
    add_dependencies(${executable} dist_library_order)
    # Link options come before the objects: the list becomes the first DT_NEEDED entries.
    target_link_options(${executable} PRIVATE "@${rsp}")
    set_property(TARGET ${executable} APPEND PROPERTY LINK_DEPENDS ${rsp})
    math(EXPR ordered "${ordered} + 1")
  endforeach()
  if(DIST_BUILD_TESTS)
    # Same libraries, every strongly defined symbol bound as in the natural order, half the
    # search (tests/tools/check_library_order.py).
    add_test(NAME library_order
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/tools/check_library_order.py
                     $<TARGET_FILE:dist-train-natural-order> $<TARGET_FILE:dist-train>)
    set_tests_properties(library_order PROPERTIES TIMEOUT 120 LABELS "unit;parallel")
  endif()
  message(STATUS "distribute: ${ordered} executables load LibTorch's libraries in the order of "
                 "build/library_order.rsp (cmake/library_order.py)")
endfunction()
