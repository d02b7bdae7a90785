# Sourced from the repository root by the GPU-machine scripts: tools/gpu/stage.sh stores the binaries in .carry/gpu
# xz-compressed (to fit the device tool's carry limit); this unpacks them once (python3's lzma where xz is missing).
unpack_staged_file() {
  if command -v xz > /dev/null; then
    xz -d -f "$1"
  else
    python3 -c 'import lzma, os, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], "wb")); os.remove(sys.argv[1])' "$1"
  fi
  chmod +x "${1%.xz}"
}
# Every .xz file of the given folders (default .carry/gpu), once.
unpack_staged_dirs() {
  local staged_packed dir
  for dir in "${@:-.carry/gpu}"; do
    for staged_packed in "$dir"/*.xz; do
      if [ -f "$staged_packed" ]; then unpack_staged_file "$staged_packed"; fi
    done
  done
}
unpack_staged_dirs .carry/gpu
