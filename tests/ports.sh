# Port helpers for tests/run.sh and its service scripts (sourced; needs `log` and $PY).

wait_for_port() {  # wait_for_port PORT NAME: until something accepts on 127.0.0.1:PORT, max 30 s
  local deadline=$((SECONDS + 30))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    if ((SECONDS > deadline)); then log "$2 did not open port $1"; exit 1; fi
    sleep 0.1
  done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {  # pick_port PREFERRED: PREFERRED when nothing listens there, else a free port
  if (($1 > 0)) && port_free "$1"; then echo "$1"; return; fi
  local port
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  (($1 > 0)) && log "port $1 is busy; using $port instead"
  echo "$port"
}
