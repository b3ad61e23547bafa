# cmake --install: headers, libreprise.so and libreprise.a, the CMake package
# (find_package(reprise) -> reprise::reprise, reprise::reprise_static), a
# pkg-config file, the launcher reprise-run with the launcher's fd guard, the
# commands reprise-images, reprise-dataloss and reprise-settings, the preloaded heap, the
# message log (libreprise_msglog.so), the licence.
# The README's "In your own project" says how to use them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(REPRISE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/reprise)
install(TARGETS reprise reprise_shared EXPORT repriseTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/reprise DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/reprise/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/reprise)
install(EXPORT repriseTargets NAMESPACE reprise:: DESTINATION ${REPRISE_CMAKE_DIR})

# The package finds the MPI reprise was built with unless the user names one,
# and for the static library the HDF5 it was built with.
set(REPRISE_BUILT_WITH_MPI_HOME "${MPI_HOME}")
list(GET HDF5_C_LIBRARIES 0 hdf5_library)
get_filename_component(REPRISE_HDF5_LIBRARY_DIR "${hdf5_library}" DIRECTORY)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/repriseConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/repriseConfig.cmake INSTALL_DESTINATION ${REPRISE_CMAKE_DIR})
# 0.x: a new minor version may change the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/repriseConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/repriseConfig.cmake ${PROJECT_BINARY_DIR}/repriseConfigVersion.cmake
        DESTINATION ${REPRISE_CMAKE_DIR})

# Relocatable: the prefix is found from the .pc file's own place, so that
# `cmake --install --prefix` anywhere gives a working file.
file(RELATIVE_PATH REPRISE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
configure_file(${PROJECT_SOURCE_DIR}/cmake/reprise.pc.in ${PROJECT_BINARY_DIR}/reprise.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/reprise.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# reprise-run finds the guard at ../libexec/reprise/ from its own place, and
# the mpirun of the MPI reprise was built with in ../share/reprise/mpirun.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/reprise-run DESTINATION ${CMAKE_INSTALL_BINDIR})
file(WRITE ${PROJECT_BINARY_DIR}/reprise-run-mpirun "${MPIEXEC_EXECUTABLE}\n")
install(FILES ${PROJECT_BINARY_DIR}/reprise-run-mpirun DESTINATION ${CMAKE_INSTALL_DATADIR}/reprise RENAME mpirun)
# The commands beside the library: the images of a disk level, the data-loss model.
install(TARGETS reprise-images reprise-dataloss reprise-settings RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS reprise_prte_fd_guard LIBRARY DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/reprise)
install(TARGETS reprise_heap reprise_msglog_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
