# Install rules and Debian packages (CPack). tools/build-packages.sh builds
# them; docs/deploy.md says what each package holds.
#
#   pitstop-agent            /usr/bin/pitstop-agent, its unit, /etc/pitstop/agent.yaml
#   pitstop-controller       /usr/bin/pitstop-controller, its unit, controller.yaml
#   pitstopctl               /usr/bin/pitstopctl, /usr/bin/pitstop (analyze, replay)
#   libnccl-profiler-pitstop the in-process library, the NCCL tuner, the Slurm TaskProlog
#   python3-pitstop          the trainer library (when python/pitstop exists),
#                            its gRPC stubs and the torch backend extension
#
# Units and /etc files have absolute destinations: packages (and a root
# `cmake --install`) put them where systemd and operators look. The units'
# ExecStart names the binary under the install prefix (/usr/bin in the
# packages, /usr/local/bin for `cmake --install build`).
include(GNUInstallDirs)

set(PITSTOP_UNIT_DIR "/lib/systemd/system" CACHE PATH
    "Where the systemd units are installed")
# Debian's multiarch library directory, also under /usr/local.
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(PITSTOP_LIBDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}")
else()
  set(PITSTOP_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
endif()

# --- what each component installs ------------------------------------------
install(TARGETS pitstop-agent RUNTIME DESTINATION bin COMPONENT agent)
install(TARGETS pitstop-controller RUNTIME DESTINATION bin
        COMPONENT controller)
install(TARGETS pitstopctl pitstop RUNTIME DESTINATION bin COMPONENT ctl)
install(TARGETS nccl-profiler-pitstop LIBRARY DESTINATION ${PITSTOP_LIBDIR}
        COMPONENT profiler)
# The NCCL tuner that applies a flow plan (docs/planning.md); same package.
install(TARGETS nccl-tuner-pitstop LIBRARY DESTINATION ${PITSTOP_LIBDIR}
        COMPONENT profiler)
install(PROGRAMS deploy/slurm/pitstop-task-prolog.sh
        DESTINATION share/pitstop/slurm COMPONENT profiler)

foreach(daemon agent controller)
  # The unit with ExecStart under the prefix the install runs with.
  install(CODE "
    file(READ \"${PROJECT_SOURCE_DIR}/deploy/pitstop-${daemon}.service\" _unit)
    string(REPLACE \"/usr/local/bin/\" \"\${CMAKE_INSTALL_PREFIX}/bin/\" _unit \"\${_unit}\")
    file(MAKE_DIRECTORY \"\$ENV{DESTDIR}${PITSTOP_UNIT_DIR}\")
    file(WRITE \"\$ENV{DESTDIR}${PITSTOP_UNIT_DIR}/pitstop-${daemon}.service\" \"\${_unit}\")
    message(STATUS \"Installing: \$ENV{DESTDIR}${PITSTOP_UNIT_DIR}/pitstop-${daemon}.service\")
  " COMPONENT ${daemon})
  install(FILES deploy/config/${daemon}.yaml DESTINATION /etc/pitstop
          COMPONENT ${daemon})
  install(FILES deploy/config/default-pitstop-${daemon}
          DESTINATION /etc/default RENAME pitstop-${daemon} COMPONENT ${daemon})
  install(FILES deploy/config/sysusers-pitstop.conf
          DESTINATION lib/sysusers.d RENAME pitstop-${daemon}.conf
          COMPONENT ${daemon})
endforeach()
install(FILES deploy/slurm/controller-slurm.yaml
        DESTINATION share/doc/pitstop-controller/examples COMPONENT controller)
install(FILES deploy/grafana/pitstop-dashboard.json
        DESTINATION share/pitstop/grafana COMPONENT controller)

set(_components agent controller ctl profiler)
set(_py_dest lib/python3/dist-packages)
if(EXISTS ${PROJECT_SOURCE_DIR}/python/pitstop)
  # The trainer library (issue #16).
  install(DIRECTORY python/pitstop DESTINATION ${_py_dest}
          COMPONENT python PATTERN "__pycache__" EXCLUDE)
  # Its generated stubs of trainer.proto (pitstop.v1): without them the
  # installed TrainerClient cannot reach the agent.
  if(PITSTOP_PY_GEN_DIR)
    install(DIRECTORY ${PITSTOP_PY_GEN_DIR}/pitstop/v1
            DESTINATION ${_py_dest}/pitstop COMPONENT python
            PATTERN "__pycache__" EXCLUDE)
  endif()
  # The torch backend (issue #28, src/torch_backend): pitstop.torch.
  # _nccl_backend beside pitstop/torch/nccl_backend.py. Never the CPU NCCL
  # backend: users point LD_LIBRARY_PATH at a libnccl.so.2 (docs/pytorch.md).
  if(PITSTOP_TORCH_BACKEND_TARGET)
    install(TARGETS ${PITSTOP_TORCH_BACKEND_TARGET}
            LIBRARY DESTINATION ${_py_dest}/pitstop/torch COMPONENT python)
  endif()
  list(APPEND _components python)
endif()

# What tools/build-packages.sh builds: every target the packages install.
add_custom_target(pitstop_packages)
add_dependencies(pitstop_packages pitstop-agent pitstop-controller pitstopctl
                 pitstop nccl-profiler-pitstop nccl-tuner-pitstop)
foreach(_t pitstop_py_proto ${PITSTOP_TORCH_BACKEND_TARGET})
  if(TARGET ${_t})
    add_dependencies(pitstop_packages ${_t})
  endif()
endforeach()

# --- Debian packages ----------------------------------------------------------
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "pitstop")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "pitstop maintainers <pitstop@example.org>")
set(CPACK_PACKAGE_VENDOR "pitstop")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "keeps large distributed training jobs running")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/pitstop/pitstop")
set(CPACK_COMPONENTS_ALL ${_components})
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Packages install under /usr; DESTDIR staging so that the units and /etc
# files land at their absolute paths inside the package.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)   # Depends: from dpkg-shlibdeps
set(CPACK_DEBIAN_COMPRESSION_TYPE "gzip")
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")

set(CPACK_DEBIAN_AGENT_PACKAGE_NAME "pitstop-agent")
set(CPACK_COMPONENT_AGENT_DESCRIPTION
    "pitstop node agent\n Receives NCCL telemetry from the training processes on this machine\n over a Unix socket and streams per-collective summaries to\n pitstop-controller; Prometheus metrics on :9471.")
set(CPACK_DEBIAN_CONTROLLER_PACKAGE_NAME "pitstop-controller")
set(CPACK_COMPONENT_CONTROLLER_DESCRIPTION
    "pitstop cluster controller\n Joins the agents' telemetry, localises faults (stragglers, slow links,\n hangs, dead processes), keeps them in SQLite, serves the gRPC API,\n drains Slurm nodes and runs operator hooks on fault changes.")
set(CPACK_DEBIAN_CTL_PACKAGE_NAME "pitstopctl")
set(CPACK_COMPONENT_CTL_DESCRIPTION
    "pitstop operator tools\n pitstopctl (faults, nodes, jobs, policies over the Controller API) and\n pitstop analyze/replay for Flight Recorder, Kineto and Inspector dumps.")
set(CPACK_DEBIAN_PROFILER_PACKAGE_NAME "libnccl-profiler-pitstop")
set(CPACK_DEBIAN_PROFILER_PACKAGE_SECTION "libs")
set(CPACK_COMPONENT_PROFILER_DESCRIPTION
    "pitstop in-process library (NCCL profiler plugin)\n Loaded by NCCL through NCCL_PROFILER_PLUGIN or LD_PRELOAD; records\n collective timings and streams them to pitstop-agent. Includes a Slurm\n TaskProlog that sets NCCL_PROFILER_PLUGIN and PITSTOP_JOB_ID, and the\n NCCL tuner libnccl-tuner-pitstop.so (NCCL_TUNER_PLUGIN=pitstop) that\n applies the controller's flow plan.")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME "python3-pitstop")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION "python")
if(PITSTOP_TORCH_BACKEND_TARGET)
  # The extension: this architecture, this CPython (its file name carries
  # the ABI tag) and this libtorch's C++ ABI. Its DT_NEEDED libnccl.so.2
  # belongs to no Debian package (NVIDIA's NCCL, or the CPU backend of a
  # pitstop build), so dpkg-shlibdeps cannot run: the libraries it links
  # are listed here (readelf -d; tests/deploy/package_test.py checks them).
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
  set(_py ${PITSTOP_TORCH_BACKEND_PYTHON})     # e.g. 3.11
  set(_torch ${PITSTOP_TORCH_BACKEND_TORCH})   # e.g. 1.13
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\2" _py_minor ${_py})
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1" _py_major ${_py})
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\2" _torch_minor ${_torch})
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+)$" "\\1" _torch_major ${_torch})
  math(EXPR _py_next "${_py_minor} + 1")
  math(EXPR _torch_next "${_torch_minor} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3 (>= ${_py}~), python3 (<< ${_py_major}.${_py_next}), python3-torch (>= ${_torch}), python3-torch (<< ${_torch_major}.${_torch_next}~), libtorch${_torch}, libabsl20220623, libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, python3-grpcio, python3-protobuf")
else()
  set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE "all")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3, python3-grpcio, python3-protobuf")
endif()
# CPack names a control file after its file: the prerm goes in as prerm.
configure_file(deploy/debian/python3-pitstop-prerm.in
               ${PROJECT_BINARY_DIR}/debian/python3-pitstop/prerm COPYONLY
               FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
                                GROUP_READ GROUP_EXECUTE
                                WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA
    "${PROJECT_BINARY_DIR}/debian/python3-pitstop/prerm")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "pitstop trainer library for Python\n Lets training code talk to pitstop (trainer side of migration and\n local SGD, multi-LoRA). pitstop.torch.nccl_backend registers the\n pitstop_nccl torch.distributed backend, whose collectives call the\n NCCL C API of the libnccl.so.2 on the loader path: a test and demo\n component for machines without a GPU (with GPUs keep torch's nccl).")

# Maintainer scripts: the pitstop user/group and the units.
foreach(daemon agent controller)
  string(TOUPPER ${daemon} _D)
  set(PKG pitstop-${daemon})
  set(_dir ${PROJECT_BINARY_DIR}/debian/${PKG})
  if(daemon STREQUAL "controller")
    set(PURGE_STATE "rm -f /var/lib/pitstop/controller.db /var/lib/pitstop/controller.db-wal /var/lib/pitstop/controller.db-shm /var/lib/pitstop/controller.db.lock /var/lib/pitstop/actions.jsonl")
  else()
    set(PURGE_STATE ":")
  endif()
  foreach(script postinst prerm postrm)
    configure_file(deploy/debian/${script}.in ${_dir}/${script} @ONLY
                   FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
                                    GROUP_READ GROUP_EXECUTE
                                    WORLD_READ WORLD_EXECUTE)
  endforeach()
  file(WRITE ${_dir}/conffiles
       "/etc/pitstop/${daemon}.yaml\n/etc/default/pitstop-${daemon}\n")
  set(CPACK_DEBIAN_${_D}_PACKAGE_CONTROL_EXTRA
      "${_dir}/postinst;${_dir}/prerm;${_dir}/postrm;${_dir}/conffiles")
  set(CPACK_DEBIAN_${_D}_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
endforeach()
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS "libnccl-profiler-pitstop")
set(CPACK_DEBIAN_CONTROLLER_PACKAGE_SUGGESTS "pitstopctl, slurm-client")

include(CPack)
