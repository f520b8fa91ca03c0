# mpickpt_add_manpage(TARGET <target> NAME <name> SUMMARY "<one line>" [SECTION <n>]
#                     [MODE commands|help])
#
# Generates <build>/man/man<n>/<name>.<n> at build time from the program's own help text, so the
# man page and --help never disagree, and installs it to share/man/man<n>. MODE commands (the
# mpickpt tool): `prog help` gives the description and the command list, and `prog help CMD` each
# command's section. MODE help (default; any program with only --help, e.g. mpickpt-run): the
# whole of `prog --help` is the description. The text is kept as printed (no fill), roff escapes
# applied (the generator: MpickptManpageGen.cmake, run at build time). Adds the target man_<name> (built by ALL).
set(_MPICKPT_MANPAGE_GEN ${CMAKE_CURRENT_LIST_DIR}/MpickptManpageGen.cmake)

function(mpickpt_add_manpage)
  cmake_parse_arguments(M "" "TARGET;NAME;SUMMARY;SECTION;MODE" "" ${ARGN})
  if(NOT M_SECTION)
    set(M_SECTION 1)
  endif()
  if(NOT M_MODE)
    set(M_MODE help)
  endif()
  set(_out ${CMAKE_BINARY_DIR}/man/man${M_SECTION}/${M_NAME}.${M_SECTION})
  if(TARGET ${M_TARGET})
    set(_exe $<TARGET_FILE:${M_TARGET}>)
  else()
    set(_exe ${M_TARGET}) # a script in the tree: its path
  endif()
  add_custom_command(OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -DEXE=${_exe} -DNAME=${M_NAME} -DSECTION=${M_SECTION}
            -DMODE=${M_MODE} "-DSUMMARY=${M_SUMMARY}" -DVERSION=${PROJECT_VERSION} -DOUT=${_out}
            -P ${_MPICKPT_MANPAGE_GEN}
    DEPENDS ${M_TARGET} ${_MPICKPT_MANPAGE_GEN}
    COMMENT "man page ${M_NAME}(${M_SECTION}) from its --help"
    VERBATIM)
  add_custom_target(man_${M_NAME} ALL DEPENDS ${_out})
  install(FILES ${_out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${M_SECTION})
endfunction()
