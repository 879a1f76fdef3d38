# Unity builds: the C++ files of a target are compiled in batches, each batch one translation unit that #includes
# its files. A batch parses the shared headers (LibTorch's, or the precompiled header's ~3.5 CPU-s load, GTest's,
# nlohmann-json's) once instead of once a file, and instantiates and optimises the shared inline code once.
# docs/BENCHMARKS.md ("Cold build") has the numbers.
#
# The files of one batch share a translation unit, so two of them must not define the same name at namespace
# scope (also in an anonymous namespace or as `static`), and a file must not rely on a macro or a `using` of an
# earlier one. A file that cannot share one is named in DFLASH_UNITY_ALONE (below) and compiled alone, as before;
# CMake itself keeps out a file with its own compile options, definitions or include folders.
# DFLASH_UNITY=OFF compiles every file alone (each file must still compile so: CI's clang fuzz build and the
# Python package build compile some of them alone).
option(DFLASH_UNITY "Compile the C++ files of each target in batches (unity build)" ON)
set(DFLASH_UNITY_BATCH 8 CACHE STRING "Files per unity batch (DFLASH_UNITY)")
# Files compiled alone, by file name (so the entry survives a move): each defines a name that another file of its
# target defines too (in brackets: the name, the other file). A clash shows as GCC's "redefinition of
# '... {anonymous}::NAME'" in a unity_*.cxx: add the file here, or give the helper one home in a header.
set(DFLASH_UNITY_ALONE
    dspark_lm_loss_op.cpp                 # (acc_of, chunked_lm_loss_op.cpp)
    loss_selfcheck.cpp                    # (LossOutputs, chunked_lm_loss_op.cpp)
    dflash2_train_settings.cpp)           # (shown, train_config.cpp)

# ON when CMake leaves `src` out of a unity batch of `target`: its own options, definitions, include folders.
function(dflash_unity_excluded target src out_var)
  set(${out_var} OFF PARENT_SCOPE)
  cmake_path(GET src FILENAME name)
  if(name IN_LIST DFLASH_UNITY_ALONE)
    set_source_files_properties("${src}" TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
  foreach(prop COMPILE_OPTIONS COMPILE_DEFINITIONS COMPILE_FLAGS INCLUDE_DIRECTORIES SKIP_UNITY_BUILD_INCLUSION)
    get_source_file_property(value "${src}" TARGET_DIRECTORY ${target} ${prop})
    if(value)
      set(${out_var} ON PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# For a target whose files take the precompiled LibTorch header (cmake/dflash_torch_pch.cmake): its C++ `sources`
# (absolute paths) in batches of about DFLASH_UNITY_BATCH, each batch with at least one of `users` (the files that
# take the header), so that each batch takes it. Sets `skipped_var` (in the caller) to the files that still need
# SKIP_PRECOMPILE_HEADERS: those left out of the batches that do not take the header.
function(dflash_unity_groups target sources users skipped_var)
  set(heavy "")
  set(light "")
  set(alone "")
  foreach(src IN LISTS sources)
    dflash_unity_excluded(${target} "${src}" excluded)
    if(excluded)
      if(NOT src IN_LIST users)
        list(APPEND alone "${src}")
      endif()
    elseif(src IN_LIST users)
      list(APPEND heavy "${src}")
    else()
      list(APPEND light "${src}")
    endif()
  endforeach()
  set(${skipped_var} "${alone}" PARENT_SCOPE)
  list(LENGTH heavy n_heavy)
  list(LENGTH light n_light)
  math(EXPR n "${n_heavy} + ${n_light}")
  if(n_heavy EQUAL 0 OR n LESS 2)
    set(${skipped_var} "${alone};${light}" PARENT_SCOPE)
    return()
  endif()
  # k batches, at most one per heavy file; files dealt in turn (heavy first), in sorted order, so that a batch
  # does not change with the order of a source list.
  math(EXPR k "(${n} + ${DFLASH_UNITY_BATCH} - 1) / ${DFLASH_UNITY_BATCH}")
  if(k GREATER n_heavy)
    set(k ${n_heavy})
  endif()
  list(SORT heavy)
  list(SORT light)
  set(i 0)
  foreach(src IN LISTS heavy light)
    math(EXPR group "${i} % ${k}")
    set_source_files_properties("${src}" TARGET_DIRECTORY ${target} PROPERTIES UNITY_GROUP "u${group}")
    math(EXPR i "${i} + 1")
  endforeach()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
endfunction()

# Every other library and program defined in `DIRECTORIES` (and their subfolders) with two or more C++ files, but
# those with CUDA files or their own -O/-f/-m options (the kernels, compiled per instruction set): batches of
# DFLASH_UNITY_BATCH files in source order. Call after dflash_torch_pch, which batches the targets it serves.
function(dflash_unity)
  cmake_parse_arguments(arg "" "" "DIRECTORIES" ${ARGN})
  if(NOT DFLASH_UNITY)
    return()
  endif()
  foreach(dir IN LISTS arg_DIRECTORIES)
    if(NOT EXISTS "${dir}/CMakeLists.txt")
      continue()
    endif()
    dflash_targets_in("${dir}" targets)
    foreach(t IN LISTS targets)
      dflash_plain_cxx_target(${t} plain other)
      if(NOT plain)
        continue()
      endif()
      get_target_property(unity ${t} UNITY_BUILD)
      if(unity)
        continue()
      endif()
      get_target_property(sources ${t} SOURCES)
      list(FILTER sources INCLUDE REGEX "\\.(cpp|cc|cxx)$")
      list(LENGTH sources n)
      if(n LESS 2)
        continue()
      endif()
      get_target_property(source_dir ${t} SOURCE_DIR)
      foreach(src IN LISTS sources)
        cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY "${source_dir}" OUTPUT_VARIABLE src)
        dflash_unity_excluded(${t} "${src}" excluded)
      endforeach()
      set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH
                                             UNITY_BUILD_BATCH_SIZE ${DFLASH_UNITY_BATCH})
    endforeach()
  endforeach()
endfunction()
