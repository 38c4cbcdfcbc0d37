#!/usr/bin/env bash
# Writes the tiny image folder that configs/image_folder_tiny.prototxt trains on: 4 classes of
# noisy solid colours, 12 training and 4 validation images each, 18x20 binary PPM files in
# ImageNet's layout (DIR/train/<class>/*.ppm, DIR/val/<class>/*.ppm). Plain bash, no
# dependencies; deterministic (bash's RANDOM, seeded).
# Usage: apps/scripts/make_image_folder_tiny.sh [DIR]   (default: datasets/image_folder_tiny)
set -euo pipefail
DIR="${1:-datasets/image_folder_tiny}"
WIDTH=18 HEIGHT=20
COLORS=("230 40 40" "40 230 40" "40 40 230" "200 200 40")
RANDOM=7

# One image: the class colour plus uniform noise in [-24, 24] on every channel of every pixel.
write_ppm() {
  local path=$1 r=$2 g=$3 b=$4 pixels="" v c octal
  for ((i = 0; i < WIDTH * HEIGHT; ++i)); do
    for c in "$r" "$g" "$b"; do
      v=$((c + RANDOM % 49 - 24))
      ((v < 0)) && v=0
      ((v > 255)) && v=255
      printf -v octal '\\%03o' "$v"
      pixels+=$octal
    done
  done
  { printf 'P6\n%d %d\n255\n' "$WIDTH" "$HEIGHT"; printf '%b' "$pixels"; } > "$path"
}

for split in train val; do
  count=$([[ $split == train ]] && echo 12 || echo 4)
  for k in 0 1 2 3; do
    mkdir -p "$DIR/$split/class$k"
    read -r r g b <<< "${COLORS[$k]}"
    for ((n = 0; n < count; ++n)); do write_ppm "$DIR/$split/class$k/$n.ppm" "$r" "$g" "$b"; done
  done
done
echo "wrote $DIR (train: 48 images, val: 16 images, 4 classes)"
