# cmake -DDIR=<path> -P fresh_dir.cmake : removes DIR and creates it empty (with its parents).
if(NOT DIR)
  message(FATAL_ERROR "fresh_dir.cmake: DIR not set")
endif()
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")
