_bcd() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="bcd"
                ;;
            bcd,cdi)
                cmd="bcd__subcmd__cdi"
                ;;
            bcd,diag)
                cmd="bcd__subcmd__diag"
                ;;
            bcd,doctor)
                cmd="bcd__subcmd__doctor"
                ;;
            bcd,generate-docs)
                cmd="bcd__subcmd__generate__subcmd__docs"
                ;;
            bcd,gpu)
                cmd="bcd__subcmd__gpu"
                ;;
            bcd,hardware)
                cmd="bcd__subcmd__hardware"
                ;;
            bcd,help)
                cmd="bcd__subcmd__help"
                ;;
            bcd,helper)
                cmd="bcd__subcmd__helper"
                ;;
            bcd,hold)
                cmd="bcd__subcmd__hold"
                ;;
            bcd,mig)
                cmd="bcd__subcmd__mig"
                ;;
            bcd,node)
                cmd="bcd__subcmd__node"
                ;;
            bcd,remediations)
                cmd="bcd__subcmd__remediations"
                ;;
            bcd,status)
                cmd="bcd__subcmd__status"
                ;;
            bcd,vfio)
                cmd="bcd__subcmd__vfio"
                ;;
            bcd,vm)
                cmd="bcd__subcmd__vm"
                ;;
            bcd__subcmd__cdi,help)
                cmd="bcd__subcmd__cdi__subcmd__help"
                ;;
            bcd__subcmd__cdi,render)
                cmd="bcd__subcmd__cdi__subcmd__render"
                ;;
            bcd__subcmd__cdi__subcmd__help,help)
                cmd="bcd__subcmd__cdi__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__cdi__subcmd__help,render)
                cmd="bcd__subcmd__cdi__subcmd__help__subcmd__render"
                ;;
            bcd__subcmd__gpu,help)
                cmd="bcd__subcmd__gpu__subcmd__help"
                ;;
            bcd__subcmd__gpu,reset)
                cmd="bcd__subcmd__gpu__subcmd__reset"
                ;;
            bcd__subcmd__gpu__subcmd__help,help)
                cmd="bcd__subcmd__gpu__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__gpu__subcmd__help,reset)
                cmd="bcd__subcmd__gpu__subcmd__help__subcmd__reset"
                ;;
            bcd__subcmd__help,cdi)
                cmd="bcd__subcmd__help__subcmd__cdi"
                ;;
            bcd__subcmd__help,diag)
                cmd="bcd__subcmd__help__subcmd__diag"
                ;;
            bcd__subcmd__help,doctor)
                cmd="bcd__subcmd__help__subcmd__doctor"
                ;;
            bcd__subcmd__help,generate-docs)
                cmd="bcd__subcmd__help__subcmd__generate__subcmd__docs"
                ;;
            bcd__subcmd__help,gpu)
                cmd="bcd__subcmd__help__subcmd__gpu"
                ;;
            bcd__subcmd__help,hardware)
                cmd="bcd__subcmd__help__subcmd__hardware"
                ;;
            bcd__subcmd__help,help)
                cmd="bcd__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__help,helper)
                cmd="bcd__subcmd__help__subcmd__helper"
                ;;
            bcd__subcmd__help,hold)
                cmd="bcd__subcmd__help__subcmd__hold"
                ;;
            bcd__subcmd__help,mig)
                cmd="bcd__subcmd__help__subcmd__mig"
                ;;
            bcd__subcmd__help,node)
                cmd="bcd__subcmd__help__subcmd__node"
                ;;
            bcd__subcmd__help,remediations)
                cmd="bcd__subcmd__help__subcmd__remediations"
                ;;
            bcd__subcmd__help,status)
                cmd="bcd__subcmd__help__subcmd__status"
                ;;
            bcd__subcmd__help,vfio)
                cmd="bcd__subcmd__help__subcmd__vfio"
                ;;
            bcd__subcmd__help,vm)
                cmd="bcd__subcmd__help__subcmd__vm"
                ;;
            bcd__subcmd__help__subcmd__cdi,render)
                cmd="bcd__subcmd__help__subcmd__cdi__subcmd__render"
                ;;
            bcd__subcmd__help__subcmd__gpu,reset)
                cmd="bcd__subcmd__help__subcmd__gpu__subcmd__reset"
                ;;
            bcd__subcmd__help__subcmd__helper,ping)
                cmd="bcd__subcmd__help__subcmd__helper__subcmd__ping"
                ;;
            bcd__subcmd__help__subcmd__hold,apply)
                cmd="bcd__subcmd__help__subcmd__hold__subcmd__apply"
                ;;
            bcd__subcmd__help__subcmd__hold,list)
                cmd="bcd__subcmd__help__subcmd__hold__subcmd__list"
                ;;
            bcd__subcmd__help__subcmd__hold,release)
                cmd="bcd__subcmd__help__subcmd__hold__subcmd__release"
                ;;
            bcd__subcmd__help__subcmd__mig,apply)
                cmd="bcd__subcmd__help__subcmd__mig__subcmd__apply"
                ;;
            bcd__subcmd__help__subcmd__mig,plan)
                cmd="bcd__subcmd__help__subcmd__mig__subcmd__plan"
                ;;
            bcd__subcmd__help__subcmd__mig,status)
                cmd="bcd__subcmd__help__subcmd__mig__subcmd__status"
                ;;
            bcd__subcmd__help__subcmd__vfio,bind)
                cmd="bcd__subcmd__help__subcmd__vfio__subcmd__bind"
                ;;
            bcd__subcmd__help__subcmd__vfio,release)
                cmd="bcd__subcmd__help__subcmd__vfio__subcmd__release"
                ;;
            bcd__subcmd__help__subcmd__vm,destroy)
                cmd="bcd__subcmd__help__subcmd__vm__subcmd__destroy"
                ;;
            bcd__subcmd__help__subcmd__vm,restore)
                cmd="bcd__subcmd__help__subcmd__vm__subcmd__restore"
                ;;
            bcd__subcmd__help__subcmd__vm,start)
                cmd="bcd__subcmd__help__subcmd__vm__subcmd__start"
                ;;
            bcd__subcmd__helper,help)
                cmd="bcd__subcmd__helper__subcmd__help"
                ;;
            bcd__subcmd__helper,ping)
                cmd="bcd__subcmd__helper__subcmd__ping"
                ;;
            bcd__subcmd__helper__subcmd__help,help)
                cmd="bcd__subcmd__helper__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__helper__subcmd__help,ping)
                cmd="bcd__subcmd__helper__subcmd__help__subcmd__ping"
                ;;
            bcd__subcmd__hold,apply)
                cmd="bcd__subcmd__hold__subcmd__apply"
                ;;
            bcd__subcmd__hold,help)
                cmd="bcd__subcmd__hold__subcmd__help"
                ;;
            bcd__subcmd__hold,list)
                cmd="bcd__subcmd__hold__subcmd__list"
                ;;
            bcd__subcmd__hold,release)
                cmd="bcd__subcmd__hold__subcmd__release"
                ;;
            bcd__subcmd__hold__subcmd__help,apply)
                cmd="bcd__subcmd__hold__subcmd__help__subcmd__apply"
                ;;
            bcd__subcmd__hold__subcmd__help,help)
                cmd="bcd__subcmd__hold__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__hold__subcmd__help,list)
                cmd="bcd__subcmd__hold__subcmd__help__subcmd__list"
                ;;
            bcd__subcmd__hold__subcmd__help,release)
                cmd="bcd__subcmd__hold__subcmd__help__subcmd__release"
                ;;
            bcd__subcmd__mig,apply)
                cmd="bcd__subcmd__mig__subcmd__apply"
                ;;
            bcd__subcmd__mig,help)
                cmd="bcd__subcmd__mig__subcmd__help"
                ;;
            bcd__subcmd__mig,plan)
                cmd="bcd__subcmd__mig__subcmd__plan"
                ;;
            bcd__subcmd__mig,status)
                cmd="bcd__subcmd__mig__subcmd__status"
                ;;
            bcd__subcmd__mig__subcmd__help,apply)
                cmd="bcd__subcmd__mig__subcmd__help__subcmd__apply"
                ;;
            bcd__subcmd__mig__subcmd__help,help)
                cmd="bcd__subcmd__mig__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__mig__subcmd__help,plan)
                cmd="bcd__subcmd__mig__subcmd__help__subcmd__plan"
                ;;
            bcd__subcmd__mig__subcmd__help,status)
                cmd="bcd__subcmd__mig__subcmd__help__subcmd__status"
                ;;
            bcd__subcmd__vfio,bind)
                cmd="bcd__subcmd__vfio__subcmd__bind"
                ;;
            bcd__subcmd__vfio,help)
                cmd="bcd__subcmd__vfio__subcmd__help"
                ;;
            bcd__subcmd__vfio,release)
                cmd="bcd__subcmd__vfio__subcmd__release"
                ;;
            bcd__subcmd__vfio__subcmd__help,bind)
                cmd="bcd__subcmd__vfio__subcmd__help__subcmd__bind"
                ;;
            bcd__subcmd__vfio__subcmd__help,help)
                cmd="bcd__subcmd__vfio__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__vfio__subcmd__help,release)
                cmd="bcd__subcmd__vfio__subcmd__help__subcmd__release"
                ;;
            bcd__subcmd__vm,destroy)
                cmd="bcd__subcmd__vm__subcmd__destroy"
                ;;
            bcd__subcmd__vm,help)
                cmd="bcd__subcmd__vm__subcmd__help"
                ;;
            bcd__subcmd__vm,restore)
                cmd="bcd__subcmd__vm__subcmd__restore"
                ;;
            bcd__subcmd__vm,start)
                cmd="bcd__subcmd__vm__subcmd__start"
                ;;
            bcd__subcmd__vm__subcmd__help,destroy)
                cmd="bcd__subcmd__vm__subcmd__help__subcmd__destroy"
                ;;
            bcd__subcmd__vm__subcmd__help,help)
                cmd="bcd__subcmd__vm__subcmd__help__subcmd__help"
                ;;
            bcd__subcmd__vm__subcmd__help,restore)
                cmd="bcd__subcmd__vm__subcmd__help__subcmd__restore"
                ;;
            bcd__subcmd__vm__subcmd__help,start)
                cmd="bcd__subcmd__vm__subcmd__help__subcmd__start"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        bcd)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__cdi)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version render help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__cdi__subcmd__help)
            opts="render help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__cdi__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__cdi__subcmd__help__subcmd__render)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__cdi__subcmd__render)
            opts="-h -V --kubernetes --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__diag)
            opts="-i -h -V --gpu --id --expected-gpus --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --gpu)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -i)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --expected-gpus)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__doctor)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__generate__subcmd__docs)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__gpu)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version reset help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__gpu__subcmd__help)
            opts="reset help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__gpu__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__gpu__subcmd__help__subcmd__reset)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__gpu__subcmd__reset)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hardware)
            opts="-i -h -V --id --labels --gpu-slots --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -i)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpu-slots)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help)
            opts="helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__cdi)
            opts="render"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__cdi__subcmd__render)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__diag)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__doctor)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__generate__subcmd__docs)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__gpu)
            opts="reset"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__gpu__subcmd__reset)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__hardware)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__helper)
            opts="ping"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__helper__subcmd__ping)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__hold)
            opts="apply release list"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__hold__subcmd__apply)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__hold__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__hold__subcmd__release)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__mig)
            opts="plan apply status"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__mig__subcmd__apply)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__mig__subcmd__plan)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__mig__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__node)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__remediations)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vfio)
            opts="bind release"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vfio__subcmd__bind)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vfio__subcmd__release)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vm)
            opts="start restore destroy"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vm__subcmd__destroy)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vm__subcmd__restore)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__help__subcmd__vm__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__helper)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version ping help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__helper__subcmd__help)
            opts="ping help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__helper__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__helper__subcmd__help__subcmd__ping)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__helper__subcmd__ping)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version apply release list help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__apply)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__help)
            opts="apply release list help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__help__subcmd__apply)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__help__subcmd__release)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__list)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__hold__subcmd__release)
            opts="-h -V --force --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version plan apply status help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__apply)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__help)
            opts="plan apply status help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__help__subcmd__apply)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__help__subcmd__plan)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__help__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__plan)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__mig__subcmd__status)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__node)
            opts="-h -V --metrics-listen --otlp-endpoint --sample-interval --api-group --gpu-slots --metrics-compat --remediate --remediate-after --remediate-max-resets --remediate-backoff --reboot-required-file --mig-layout --nvidia-cdi-spec --device-plugin-dir --pod-resources-socket --kubernetes-release-grace --runtime-dir --nfd-features-dir --dra --kubelet-dir --cdi-runtime-dir --kubeconfig --node-name --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --metrics-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --otlp-endpoint)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sample-interval)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-group)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpu-slots)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-compat)
                    COMPREPLY=($(compgen -W "dcgm dcgm-legacy" -- "${cur}"))
                    return 0
                    ;;
                --remediate-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --remediate-max-resets)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --remediate-backoff)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --reboot-required-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-layout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-cdi-spec)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-plugin-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pod-resources-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubernetes-release-grace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --runtime-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nfd-features-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubelet-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-runtime-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --node-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__remediations)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__status)
            opts="-i -w -h -V --format --id --watch --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --format)
                    COMPREPLY=($(compgen -W "table csv json" -- "${cur}"))
                    return 0
                    ;;
                --id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -i)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version bind release help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio__subcmd__bind)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio__subcmd__help)
            opts="bind release help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio__subcmd__help__subcmd__bind)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio__subcmd__help__subcmd__release)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vfio__subcmd__release)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version start restore destroy help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__destroy)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__help)
            opts="start restore destroy help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__help__subcmd__destroy)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__help__subcmd__restore)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__help__subcmd__start)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__restore)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        bcd__subcmd__vm__subcmd__start)
            opts="-h -V --host --host-root --nvidia-smi --data-dir --cdi-dir --helper-socket --api-socket --mig-config --json --color --log-format --xid-ignore --xid-unhealthy --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --host-root)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nvidia-smi)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cdi-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --helper-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-socket)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mig-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                --xid-ignore)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --xid-unhealthy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _bcd -o nosort -o bashdefault -o default bcd
else
    complete -F _bcd -o bashdefault -o default bcd
fi
