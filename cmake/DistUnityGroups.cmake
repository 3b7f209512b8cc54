# dist_unity_groups(TARGET SOURCES ROOT MAX APART...): compiles TARGET as a unity build whose
# units are the folders of its sources (relative to ROOT), a folder of more than MAX sources
# cut into equal runs in name order. The sources listed after APART compile alone.
#
# Why folders rather than CMake's batches of N in list order: a new source then changes only the
# unit of its own folder, where in batches it shifted every batch after it (a rebuild of the
# whole library), so new files used to be kept apart, which cost a fresh build (CI's) several
# minutes of headers parsed once per file. A unit's sources share one translation unit: names
# at namespace scope (anonymous namespaces included) meet, so two sources of a folder must not
# define the same helper name, and a source whose `using namespace` or macros would leak into
# the others is listed as APART.
function(dist_unity_groups target sources root max)
  cmake_parse_arguments(PARSE_ARGV 4 ARG "" "" "APART")
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  # The sources of each folder, in name order.
  set(folders "")
  foreach(source IN LISTS sources)
    if(source IN_LIST ARG_APART)
      continue()
    endif()
    file(RELATIVE_PATH relative ${root} ${source})
    get_filename_component(folder ${relative} DIRECTORY)
    string(MAKE_C_IDENTIFIER "${folder}" key)
    list(APPEND folder_${key} ${source})
    list(APPEND folders ${key})
  endforeach()
  list(REMOVE_DUPLICATES folders)
  foreach(key IN LISTS folders)
    list(SORT folder_${key})
    list(LENGTH folder_${key} count)
    # ceil(count / max) units of equal size.
    math(EXPR units "(${count} + ${max} - 1) / ${max}")
    math(EXPR per_unit "(${count} + ${units} - 1) / ${units}")
    set(index 0)
    foreach(source IN LISTS folder_${key})
      math(EXPR unit "${index} / ${per_unit}")
      set_source_files_properties(${source} PROPERTIES UNITY_GROUP "${key}_${unit}")
      math(EXPR index "${index} + 1")
    endforeach()
  endforeach()
endfunction()
