# Finds MPI, parallel HDF5, protobuf-c and Snappy (TensorFlow bundles' compressed blocks); fails with a message naming the Debian package to install.
set(_mpickpt_pkgs "libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools protobuf-c-compiler libprotobuf-c-dev libsnappy-dev cmake pkg-config")
set(_mpickpt_hint "On Debian/Ubuntu run ./jobs/deps.sh (or: apt-get install ${_mpickpt_pkgs}).")

find_package(MPI COMPONENTS C)
if(NOT MPI_C_FOUND)
  message(FATAL_ERROR "mpickpt: no MPI C library found. Install Open MPI: "
                      "package libopenmpi-dev and openmpi-bin. ${_mpickpt_hint}")
endif()

# Debian installs several HDF5 flavours side by side; ask for the Open MPI one by name first so a
# serial flavour installed next to it is never picked.
if(NOT DEFINED HDF5_C_COMPILER_EXECUTABLE AND EXISTS /usr/bin/h5pcc.openmpi)
  set(HDF5_C_COMPILER_EXECUTABLE /usr/bin/h5pcc.openmpi)
endif()
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 COMPONENTS C)
if(NOT HDF5_FOUND)
  message(FATAL_ERROR "mpickpt: no HDF5 found. mpickpt needs the parallel (MPI) build of HDF5: "
                      "package libhdf5-openmpi-dev. ${_mpickpt_hint}")
endif()
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "mpickpt: found HDF5 ${HDF5_VERSION} but it is a serial build "
                      "(${HDF5_C_LIBRARIES}); mpickpt needs parallel HDF5 built with MPI-IO: "
                      "install package libhdf5-openmpi-dev. ${_mpickpt_hint}")
endif()
if(NOT TARGET HDF5::HDF5)
  add_library(HDF5::HDF5 INTERFACE IMPORTED)
  set_target_properties(HDF5::HDF5 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${HDF5_C_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${HDF5_C_LIBRARIES}"
    INTERFACE_COMPILE_DEFINITIONS "${HDF5_C_DEFINITIONS}")
endif()
message(STATUS "mpickpt: parallel HDF5 ${HDF5_VERSION}: ${HDF5_C_INCLUDE_DIRS}")

find_program(PROTOC_C_EXECUTABLE protoc-c)
if(NOT PROTOC_C_EXECUTABLE)
  message(FATAL_ERROR "mpickpt: protoc-c not found: install package protobuf-c-compiler. ${_mpickpt_hint}")
endif()
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(PROTOBUFC IMPORTED_TARGET libprotobuf-c)
endif()
if(NOT PROTOBUFC_FOUND)
  find_path(PROTOBUFC_INCLUDE_DIR protobuf-c/protobuf-c.h)
  find_library(PROTOBUFC_LIBRARY protobuf-c)
  if(NOT PROTOBUFC_INCLUDE_DIR OR NOT PROTOBUFC_LIBRARY)
    message(FATAL_ERROR "mpickpt: protobuf-c library not found: install package libprotobuf-c-dev. ${_mpickpt_hint}")
  endif()
  add_library(PkgConfig::PROTOBUFC INTERFACE IMPORTED)
  set_target_properties(PkgConfig::PROTOBUFC PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${PROTOBUFC_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${PROTOBUFC_LIBRARY}")
endif()

# Snappy: import-tf reads TensorFlow bundle indexes whose blocks may be Snappy-compressed.
find_path(SNAPPY_INCLUDE_DIR snappy-c.h)
find_library(SNAPPY_LIBRARY snappy)
if(NOT SNAPPY_INCLUDE_DIR OR NOT SNAPPY_LIBRARY)
  message(FATAL_ERROR "mpickpt: Snappy not found: install package libsnappy-dev. ${_mpickpt_hint}")
endif()
if(NOT TARGET mpickpt::snappy)
  add_library(mpickpt::snappy INTERFACE IMPORTED)
  set_target_properties(mpickpt::snappy PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SNAPPY_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${SNAPPY_LIBRARY}")
endif()

find_package(Threads REQUIRED)
