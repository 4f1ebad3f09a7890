# FindCUDNN: cuDNN 9 ships no CMake package (NVIDIA's tarballs and the CUDA toolkit's bundled copy put cudnn.h and
# libcudnn.so beside the toolkit's), so look for the header and the library ourselves. The executor uses its
# convolution API (cudnn_cnn.h: cudnnConvolutionForward and the two backward passes), found through libcudnn.so,
# which loads the sub-libraries itself. Defines CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_VERSION and
# the imported target CUDNN::CUDNN. Hints: CUDNN_ROOT (cmake or environment), the CUDA toolkit's directories.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_major REGEX "^#define CUDNN_MAJOR +[0-9]+")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_minor REGEX "^#define CUDNN_MINOR +[0-9]+")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_patch REGEX "^#define CUDNN_PATCHLEVEL +[0-9]+")
  string(REGEX REPLACE "[^0-9]" "" _cudnn_major "${_cudnn_major}")
  string(REGEX REPLACE "[^0-9]" "" _cudnn_minor "${_cudnn_minor}")
  string(REGEX REPLACE "[^0-9]" "" _cudnn_patch "${_cudnn_patch}")
  set(CUDNN_VERSION "${_cudnn_major}.${_cudnn_minor}.${_cudnn_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::CUDNN)
  add_library(CUDNN::CUDNN UNKNOWN IMPORTED)
  set_target_properties(CUDNN::CUDNN PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
