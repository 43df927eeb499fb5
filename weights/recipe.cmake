# The pretraining recipe of the committed tiny backbone: the sources nexus-pretrain's result
# depends on, one SHA-256 per file. scripts/pretrain.sh writes the list beside the weights
# (backbone-tiny.recipe) after pretraining; the test `unit.pretrain_recipe` checks it, so that a
# change to any of these files without re-pretraining fails CI with a message naming the script.
#
#   cmake -DMODE=write -DOUT=FILE -P weights/recipe.cmake   (scripts/pretrain.sh)
#   cmake -DMODE=check -P weights/recipe.cmake              (the test)
#   -DROOT=DIR checks another copy of the tree (the test that a change is caught uses it).
#
# Why per-file hashes and not one: the failure then names the file that changed.
cmake_minimum_required(VERSION 3.25)
if(ROOT)
  set(root "${ROOT}")
else()
  get_filename_component(root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/recipe_files.cmake")  # sets recipe_files
set(lines "")
foreach(f IN LISTS recipe_files)
  file(SHA256 "${root}/${f}" h)
  string(APPEND lines "${h}  ${f}\n")
endforeach()

if(MODE STREQUAL "write")
  file(WRITE "${OUT}" "${lines}")
elseif(MODE STREQUAL "check")
  set(recorded_file "${root}/weights/backbone-tiny.recipe")
  if(NOT EXISTS "${recorded_file}")
    message(FATAL_ERROR "weights/backbone-tiny.recipe is missing: run scripts/pretrain.sh")
  endif()
  file(READ "${recorded_file}" recorded)
  if(NOT recorded STREQUAL lines)
    set(changed "")
    foreach(f IN LISTS recipe_files)
      file(SHA256 "${root}/${f}" h)
      string(FIND "${recorded}" "${h}  ${f}\n" at)
      if(at EQUAL -1)
        string(APPEND changed " ${f}")
      endif()
    endforeach()
    message(FATAL_ERROR
      "the committed tiny backbone (weights/backbone-tiny.safetensors) was pretrained from other "
      "sources than these: changed since:${changed}. Run scripts/pretrain.sh (about 6 minutes on "
      "2 cores): it re-pretrains, rewrites weights/ and this recipe; then re-measure the learning "
      "margins (scripts/learning-margins.sh) and commit both.")
  endif()
  message(STATUS "pretraining recipe matches the committed weights")
else()
  message(FATAL_ERROR "MODE must be write or check")
endif()
