# The sources the committed tiny backbone's pretraining depends on (weights/recipe.cmake).
set(recipe_files
  tools/pretrain/main.cpp tools/pretrain/grounding.cpp tools/pretrain/grounding.hpp
  synth/scenes.cpp synth/scenes.hpp
  daemon/model/backbone.cpp daemon/model/backbone.hpp
  daemon/model/backbone_config.cpp daemon/model/backbone_config.hpp
  scripts/pretrain.sh)
