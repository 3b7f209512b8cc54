# The memory allocator the project's executables link (target dist_allocator, exported as
# distribute::allocator, and in the link interface of dist: a user's executable linked with
# distribute::dist, or with distribute.pc, gets it too). glibc's malloc returns the large blocks of every training step to the
# kernel and faults them in again; on these machines that costs more than the arithmetic
# (bench/compare_allocators.sh: tcmalloc 1.1x to 5.4x of glibc across CNN and MLP, one replica
# and two; jemalloc and mimalloc lose on at least one of them). The allocator is linked ahead of
# the C library, so its malloc is the process's malloc; nothing is preloaded.
#
#   -DDIST_ALLOCATOR=tcmalloc (default) | jemalloc | mimalloc | system
set(DIST_ALLOCATOR "tcmalloc" CACHE STRING
    "malloc linked into executables: tcmalloc (default, measured fastest), jemalloc, mimalloc or system")
set_property(CACHE DIST_ALLOCATOR PROPERTY STRINGS tcmalloc jemalloc mimalloc system)

set(_dist_allocator_names_tcmalloc tcmalloc_minimal tcmalloc)
set(_dist_allocator_package_tcmalloc libgoogle-perftools-dev)
set(_dist_allocator_names_jemalloc jemalloc)
set(_dist_allocator_package_jemalloc libjemalloc-dev)
set(_dist_allocator_names_mimalloc mimalloc)
set(_dist_allocator_package_mimalloc libmimalloc-dev)

add_library(dist_allocator INTERFACE)
add_library(distribute::allocator ALIAS dist_allocator)
# Installed as distribute::allocator too (the export's namespace plus this name).
set_target_properties(dist_allocator PROPERTIES EXPORT_NAME allocator)
if(DIST_ALLOCATOR STREQUAL "system")
  message(STATUS "distribute: executables use the C library's malloc (DIST_ALLOCATOR=system)")
elseif(DEFINED _dist_allocator_names_${DIST_ALLOCATOR})
  find_library(DIST_${DIST_ALLOCATOR}_LIBRARY NAMES ${_dist_allocator_names_${DIST_ALLOCATOR}})
  if(NOT DIST_${DIST_ALLOCATOR}_LIBRARY)
    message(FATAL_ERROR
      "DIST_ALLOCATOR=${DIST_ALLOCATOR}: its library was not found. Install it "
      "(apt-get install ${_dist_allocator_package_${DIST_ALLOCATOR}}, as scripts/install-deps.sh "
      "does) or configure with -DDIST_ALLOCATOR=system.")
  endif()
  # --no-as-needed: nothing refers to the allocator by name, so a linker that drops unused
  # libraries would drop it, and with it the faster malloc.
  target_link_libraries(dist_allocator INTERFACE
    "-Wl,--push-state,--no-as-needed" "${DIST_${DIST_ALLOCATOR}_LIBRARY}" "-Wl,--pop-state")
  set(DIST_ALLOCATOR_LIBRARY "${DIST_${DIST_ALLOCATOR}_LIBRARY}")  # for distribute.pc
  message(STATUS "distribute: executables use ${DIST_ALLOCATOR} (${DIST_${DIST_ALLOCATOR}_LIBRARY})")
else()
  message(FATAL_ERROR "DIST_ALLOCATOR=${DIST_ALLOCATOR} is not one of: tcmalloc jemalloc mimalloc system")
endif()
