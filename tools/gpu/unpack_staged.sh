# Sourced from the repository root by the GPU-machine scripts: tools/gpu/stage.sh and stage_variant.sh store a
# folder's binaries as one solid xz archive, binaries.tar.xz (the binaries share most of their code, so one archive
# is ~5x smaller than each file compressed alone: it keeps the device tool's carry limit); this unpacks it once, and
# single .xz files of older stagings too (python3's lzma and tarfile where xz is missing).
unpack_staged_archive() {  # folder/binaries.tar.xz -> the files in folder
  local dir
  dir=$(dirname "$1")
  if command -v xz > /dev/null; then
    tar -xJf "$1" -C "$dir" || { echo "unpack_staged: cannot unpack $1" >&2; return 1; }
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$dir" ||
      { echo "unpack_staged: cannot unpack $1" >&2; return 1; }
  fi
  rm -f "$1"
}
unpack_staged_file() {
  if command -v xz > /dev/null; then
    xz -d -f "$1"
  else
    python3 -c 'import lzma, os, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], "wb")); os.remove(sys.argv[1])' "$1"
  fi
  chmod +x "${1%.xz}"
}
# The archive and every other .xz file of the given folders (default .carry/gpu), once.
unpack_staged_dirs() {
  local staged_packed dir
  for dir in "${@:-.carry/gpu}"; do
    if [ -f "$dir/binaries.tar.xz" ]; then unpack_staged_archive "$dir/binaries.tar.xz" || return 1; fi
    for staged_packed in "$dir"/*.xz; do
      if [ -f "$staged_packed" ] && [ "${staged_packed##*/}" != binaries.tar.xz ]; then
        unpack_staged_file "$staged_packed"
      fi
    done
  done
}
unpack_staged_dirs .carry/gpu
