# cmake -P tests/kernels/test_cuda_archs.cmake -DDFLASH_SOURCE_DIR=<checkout>: the choice of GPU architectures
# (cmake/dflash_cuda_archs.cmake) for the default, an older nvcc, the accepted spellings and each error.
cmake_minimum_required(VERSION 3.25)
include("${DFLASH_SOURCE_DIR}/cmake/dflash_cuda_archs.cmake")

set(nvcc13 sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_110 sm_103 sm_120 sm_121)
set(nvcc12_4 sm_50 sm_52 sm_60 sm_70 sm_75 sm_80 sm_86 sm_89 sm_90)

function(expect request supported want_archs want_text want_error)
  dflash_resolve_cuda_archs("${request}" "${supported}" archs error)
  dflash_describe_cuda_archs("${archs}" text)
  if(NOT archs STREQUAL want_archs OR NOT text STREQUAL want_text OR NOT error MATCHES "${want_error}")
    message(SEND_ERROR "DFLASH_CUDA_ARCHS='${request}': got '${archs}' / '${text}' / '${error}', "
                       "want '${want_archs}' / '${want_text}' / '${want_error}'")
  endif()
endfunction()

expect("auto" "${nvcc13}" "80-real;90-real;100-real;120" "sm_80 sm_90 sm_100 sm_120 compute_120" "^$")
expect("" "${nvcc13}" "80-real;90-real;100-real;120" "sm_80 sm_90 sm_100 sm_120 compute_120" "^$")
expect("auto" "${nvcc12_4}" "80-real;90" "sm_80 sm_90 compute_90" "^$")  # an nvcc without Blackwell
expect("90" "${nvcc13}" "90" "sm_90 compute_90" "^$")
expect("120,8.0 sm_90;120" "${nvcc13}" "80-real;90-real;120" "sm_80 sm_90 sm_120 compute_120" "^$")
expect("86 89" "${nvcc13}" "86-real;89" "sm_86 sm_89 compute_89" "^$")
expect("75" "${nvcc13}" "" "" "75 is below 80; the kernels need sm_80 or newer")
expect("120" "${nvcc12_4}" "" "" "this nvcc cannot compile for sm_120 \\(it supports: sm_50 .* sm_90\\)")
expect("90;hopper" "${nvcc13}" "" "" "'hopper' is not a compute capability")
expect("auto" "sm_75" "" "" "none of 80;90;100;120 is supported by this nvcc")
