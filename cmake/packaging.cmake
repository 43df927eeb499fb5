# Installation and the Debian package (scripts/package.sh builds it: cpack -G DEB).
#   /usr/bin/nexusd, nexusctl           the daemon and its administration tool
#   /usr/bin/nexus-dataset-reader       the sandboxed parser nexusd runs for tenants' datasets
#   /usr/bin/nexus-rollout              a rollout engine (simulation in its own process; nexus-rollout@.service)
#   maintainer scripts                  systemd/debian/: postinst, prerm, postrm (tests/deb/lifecycle_test.sh)
#   /usr/lib/systemd/system/            nexusd.service (Type=notify, watchdog) and nexusd.socket
#   /usr/lib/sysusers.d, tmpfiles.d     the nexus user and group; /var/lib/nexus (0700), /run/nexus
#   /etc/nexus/nexusd.toml              the configuration (a conffile: local edits are kept)
#   /usr/share/nexus/weights/           the embedded tiny backbone's pretrained weights
#   /usr/lib/<arch>/libnexus.a, /usr/include/nexus/, cmake/nexus/   libnexus for tenants' programs
include(GNUInstallDirs)
set(NEXUS_SYSTEMD_UNIT_DIR "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" CACHE PATH "systemd unit files")
configure_file(${PROJECT_SOURCE_DIR}/systemd/nexusd.service.in ${PROJECT_BINARY_DIR}/systemd/nexusd.service @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/systemd/nexus-rollout@.service.in ${PROJECT_BINARY_DIR}/systemd/nexus-rollout@.service
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/systemd/nexusd.service ${PROJECT_SOURCE_DIR}/systemd/nexusd.socket
              ${PROJECT_BINARY_DIR}/systemd/nexus-rollout@.service  # optional: instances are enabled by hand
              ${PROJECT_SOURCE_DIR}/systemd/nvidia-mps.service  # optional: not enabled by the package
              ${PROJECT_SOURCE_DIR}/systemd/nexus-metaworld.service  # optional, as MPS
        DESTINATION ${NEXUS_SYSTEMD_UNIT_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/systemd/sysusers.d/nexus.conf DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/sysusers.d)
install(FILES ${PROJECT_SOURCE_DIR}/systemd/tmpfiles.d/nexus.conf DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/tmpfiles.d)
install(FILES ${PROJECT_SOURCE_DIR}/systemd/nexusd.toml DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/nexus)
install(FILES ${PROJECT_SOURCE_DIR}/weights/backbone-tiny.safetensors ${PROJECT_SOURCE_DIR}/weights/backbone-tiny-report.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/nexus/weights)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/out_of_tree/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/out_of_tree)

set(CPACK_PACKAGE_NAME nexus)
set(CPACK_PACKAGE_VENDOR "Nexus")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Multi-tenant post-training of VLA robot models on one shared box")
set(CPACK_PACKAGE_CONTACT "nexus maintainers <nexus@localhost>")
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends from the binaries' shared libraries (dpkg-shlibdeps)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd, init-system-helpers, libflatbuffers-dev")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/systemd/debian/postinst;${PROJECT_SOURCE_DIR}/systemd/debian/prerm;${PROJECT_SOURCE_DIR}/systemd/debian/postrm;${PROJECT_SOURCE_DIR}/systemd/debian/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
