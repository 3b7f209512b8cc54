# distribute.pc: the library for a build without CMake,
#   g++ main.cc $(pkg-config --cflags --libs distribute)
# (installed into ${CMAKE_INSTALL_LIBDIR}/pkgconfig; PKG_CONFIG_PATH finds a prefix of one's own).
#
# Its Libs are what CMake links a consumer of distribute::dist with, written out: libdist.a, then
# every library of its link interface, depth first, each once (LibTorch's, gRPC's with Abseil's,
# libpng, libjpeg, zlib, MPI's), then the allocator. A static libdist.a needs them all on the
# command line: the linker does not look through one shared library for another's symbols ("DSO
# missing from command line"). LibTorch's libraries stay --no-as-needed as its CMake package
# says (its operators register themselves from static constructors nothing refers to), and so
# does the allocator (cmake/DistAllocator.cmake). Paths are absolute, as CMake's are; the
# package's own are relative to the .pc file, so the installed tree may move.

# Appends the link items of `item` (a target, a library path, a flag, a bare library name) to
# the global property DIST_PC_LIBS.
function(_dist_pc_walk item)
  if(item STREQUAL "" OR item MATCHES "-NOTFOUND$")
    return()
  endif()
  if(item MATCHES "^\\$<LINK_ONLY:(.+)>$")
    _dist_pc_walk("${CMAKE_MATCH_1}")
    return()
  endif()
  # LibTorch's torch_library: the interface of another target, spelled as a property.
  if(item MATCHES "^\\$<TARGET_PROPERTY:([^,>]+),INTERFACE_LINK_LIBRARIES>$")
    _dist_pc_walk_interface("${CMAKE_MATCH_1}")
    return()
  endif()
  if(NOT TARGET "${item}")
    if(item MATCHES "^[/$-]")
      # A path, a flag, or a generator expression that file(GENERATE) evaluates. LibTorch's
      # `-Wl,--no-as-needed,"LIB" -Wl,--as-needed` becomes one fragment, so that pkg-config
      # keeps its three parts together and in order.
      string(REPLACE "\"" "" item "${item}")
      string(REPLACE " -Wl," "," item "${item}")
      set_property(GLOBAL APPEND PROPERTY DIST_PC_LIBS "${item}")
    else()
      set_property(GLOBAL APPEND PROPERTY DIST_PC_LIBS "-l${item}")
    endif()
    return()
  endif()
  get_target_property(aliased "${item}" ALIASED_TARGET)
  if(aliased)
    set(item "${aliased}")
  endif()
  get_property(seen GLOBAL PROPERTY DIST_PC_SEEN)
  if("${item}" IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY DIST_PC_SEEN "${item}")
  get_target_property(type "${item}" TYPE)
  if(type MATCHES "^(SHARED|STATIC|UNKNOWN)_LIBRARY$")
    set_property(GLOBAL APPEND PROPERTY DIST_PC_LIBS "$<TARGET_FILE:${item}>")
  endif()
  _dist_pc_walk_interface("${item}")
endfunction()

function(_dist_pc_walk_interface target)
  get_target_property(items "${target}" INTERFACE_LINK_LIBRARIES)
  if(items)
    foreach(item IN LISTS items)
      _dist_pc_walk("${item}")
    endforeach()
  endif()
endfunction()

# Writes ${PROJECT_BINARY_DIR}/distribute.pc for `library` (the dist target) and installs it.
function(dist_write_pkg_config library)
  set_property(GLOBAL PROPERTY DIST_PC_LIBS "")
  # The library itself and the allocator are written apart (-ldist first; the allocator as one
  # fragment).
  set_property(GLOBAL PROPERTY DIST_PC_SEEN "${library};dist_allocator")
  _dist_pc_walk_interface("${library}")
  get_property(libs GLOBAL PROPERTY DIST_PC_LIBS)
  list(REMOVE_DUPLICATES libs)
  # Threads::Threads says -pthread as a compile option; the link needs it as well.
  list(APPEND libs -pthread)
  if(DIST_ALLOCATOR_LIBRARY)
    list(APPEND libs "-Wl,--push-state,--no-as-needed,${DIST_ALLOCATOR_LIBRARY},--pop-state")
  endif()
  # A shared libdist is found at run time where it was installed, as CMake's consumers find it.
  get_target_property(type "${library}" TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    list(PREPEND libs "-Wl,-rpath,\${libdir}")
  endif()
  list(JOIN libs " " libs)

  # LibTorch's headers and flags (the C++11 ABI). A compiler's own include directories stay off
  # the line: -I/usr/include would hide the C++ library's #include_next of the C headers.
  set(cflags "")
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      list(APPEND cflags "-I${dir}")
    endif()
  endforeach()
  list(APPEND cflags ${TORCH_CXX_FLAGS} -pthread)
  list(JOIN cflags " " cflags)

  file(RELATIVE_PATH up "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
  string(REGEX REPLACE "/$" "" up "${up}")
  set(content "\
# distribute ${PROJECT_VERSION}: g++ main.cc $(pkg-config --cflags --libs distribute)
prefix=\${pcfiledir}/${up}
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}

Name: distribute
Description: tf.distribute.Strategy for C++ over LibTorch (allocator: ${DIST_ALLOCATOR})
Version: ${PROJECT_VERSION}
Cflags: -I\${includedir} ${cflags}
Libs: -L\${libdir} -l${library} ${libs}
")
  file(GENERATE OUTPUT "${PROJECT_BINARY_DIR}/distribute.pc" CONTENT "${content}")
  install(FILES "${PROJECT_BINARY_DIR}/distribute.pc"
          DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endfunction()
