# Decides whether the MPI found has the ULFM extension (MPIX_Comm_shrink and
# friends in <mpi-ext.h>) and sets REPRISE_HAVE_ULFM accordingly.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_LIBRARIES MPI::MPI_CXX)
check_cxx_source_compiles([=[
#include <mpi.h>
#include <mpi-ext.h>
int main() {
  MPI_Comm c = MPI_COMM_NULL;
  int flag = 0;
  MPIX_Comm_agree(c, &flag);
  MPIX_Comm_shrink(c, &c);
  MPI_Group g;
  MPIX_Comm_get_failed(c, &g);
  return MPIX_ERR_PROC_FAILED + MPIX_ERR_REVOKED + MPIX_ERR_PROC_FAILED_PENDING;
}]=] REPRISE_MPI_HAS_ULFM)
unset(CMAKE_REQUIRED_LIBRARIES)

if(REPRISE_ULFM STREQUAL "OFF")
  set(REPRISE_HAVE_ULFM OFF)
elseif(REPRISE_MPI_HAS_ULFM)
  set(REPRISE_HAVE_ULFM ON)
elseif(REPRISE_ULFM STREQUAL "ON")
  message(FATAL_ERROR "REPRISE_ULFM=ON but the MPI at '${MPI_CXX_COMPILER}' has no ULFM extension "
                      "(MPIX_Comm_shrink in <mpi-ext.h>). Use Open MPI 5 (scripts/bootstrap.sh installs it) "
                      "or configure with -DREPRISE_ULFM=AUTO.")
else()
  set(REPRISE_HAVE_ULFM OFF)
endif()
message(STATUS "reprise: ULFM fault tolerance ${REPRISE_HAVE_ULFM} (MPI: ${MPI_CXX_COMPILER})")
