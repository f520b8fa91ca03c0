! The Fortran module `mpickpt` (docs/fortran.md) under mpirun.
!
!   test_fortran save DIR      saves ckpt-1 and ckpt-2 of the arrays below (any rank count)
!   test_fortran restore DIR   on another rank count: first the registrations and restores that
!                              must fail, with their messages, then the restore of ckpt-2,
!                              checking every element every rank holds; then, in DIR/reason,
!                              ckpt_error_reason() of a pinned checkpoint whose index is gone
!
! Registered: w8 real(8) (5, 13), blocks of columns; w4 real(4) (10), blocks; i8 integer(8)
! (2, 3, 7), blocks along dimension 3; owned_<r> integer(4) (2, 2, 2, 2), whole and rank r's
! alone; lr real(8) (3), replicated; rng integer(8) (4), each rank's own (per_rank). Blocks are
! uneven (13 columns on 4 ranks: 4 3 3 3; on 3 ranks: 5 4 4), so a restore onto another rank
! count reads across the writer's blocks. Values depend on the generation (1: ckpt-1, 2: ckpt-2).
! Failures are summed over the ranks: every rank exits with the same status.
program test_fortran
  use mpi
  use mpickpt
  use, intrinsic :: iso_fortran_env, only: int32, int64, real32, real64
  implicit none

  integer, parameter :: NW8 = 5, MW8 = 13, NW4 = 10, MI8 = 7
  integer :: ierr, rank, nranks, provided, nfail, total
  character(len=4096) :: mode, dir

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  nfail = 0
  if (command_argument_count() /= 2) then
    if (rank == 0) print '(a)', 'usage: test_fortran save|restore DIR'
    nfail = 1
  else
    call get_command_argument(1, mode)
    call get_command_argument(2, dir)
    select case (trim(mode))
    case ('save')
      call run_save()
    case ('restore')
      call run_errors()
      call run_restore()
      call run_reason()
    case default
      nfail = 1
    end select
  end if
  call MPI_Allreduce(nfail, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total == 0) then
      print '(a,a,a,i0,a)', 'test_fortran ', trim(mode), ' on ', nranks, ' ranks: ok'
    else
      print '(a,a,a,i0)', 'test_fortran ', trim(mode), ': FAILED checks: ', total
    end if
  end if
  call MPI_Finalize(ierr)
  if (total /= 0) error stop 1

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      nfail = nfail + 1
      print '(a,i0,a,a,a,a)', 'rank ', rank, ': FAIL: ', what, ': ', ckpt_error_message()
    end if
  end subroutine check

  ! Checks that status got the expected code and that the message mentions `needle`.
  subroutine expect(status, code, needle, what)
    integer, intent(in) :: status, code
    character(len=*), intent(in) :: needle, what
    character(len=:), allocatable :: msg
    msg = ckpt_error_message()
    if (status /= code .or. index(msg, needle) == 0) then
      nfail = nfail + 1
      print '(a,i0,a,a,a,i0,a,i0,a,a,a,a)', 'rank ', rank, ': FAIL: ', what, ': status ', status, &
          ' (want ', code, '), message "', msg, '" lacks ', needle
    end if
  end subroutine expect

  ! Rank r's block of n items over p ranks: first index lo (1-based) and count.
  subroutine block(n, p, r, lo, cnt)
    integer, intent(in) :: n, p, r
    integer, intent(out) :: lo, cnt
    cnt = n / p
    lo = r * cnt + min(r, mod(n, p)) + 1
    if (r < mod(n, p)) cnt = cnt + 1
  end subroutine block

  real(real64) function vw8(i, j, gen)
    integer, intent(in) :: i, j, gen
    vw8 = real(i, real64) + 100.0_real64 * j + 0.25_real64 + 1000.0_real64 * gen
  end function vw8

  real(real32) function vw4(k, gen)
    integer, intent(in) :: k, gen
    vw4 = 0.5_real32 * k + real(gen, real32)
  end function vw4

  integer(int64) function vi8(i, j, k, gen)
    integer, intent(in) :: i, j, k, gen
    vi8 = 2_int64**40 + i + 10 * j + 100 * k + 1000 * gen
  end function vi8

  integer(int32) function vowned(r, lin, gen)
    integer, intent(in) :: r, lin, gen
    vowned = int(r * 1000 + lin + 100000 * gen, int32)
  end function vowned

  integer(int64) function vrng(r, k, gen)
    integer, intent(in) :: r, k, gen
    vrng = int(r, int64) * 10 + k + 1000000_int64 * gen
  end function vrng

  ! The model of one rank: its blocks and its own arrays, allocated with TARGET.
  subroutine fill(gen, w8, w4, i8, owned, lr, rng, lo8, lo4, loi)
    integer, intent(in) :: gen, lo8, lo4, loi
    real(real64), intent(out) :: w8(:, :), lr(:)
    real(real32), intent(out) :: w4(:)
    integer(int64), intent(out) :: i8(:, :, :), rng(:)
    integer(int32), intent(out) :: owned(:, :, :, :)
    integer :: i, j, k, l, lin
    do j = 1, size(w8, 2)
      do i = 1, NW8
        w8(i, j) = vw8(i, lo8 + j - 1, gen)
      end do
    end do
    do k = 1, size(w4)
      w4(k) = vw4(lo4 + k - 1, gen)
    end do
    do k = 1, size(i8, 3)
      do j = 1, 3
        do i = 1, 2
          i8(i, j, k) = vi8(i, j, loi + k - 1, gen)
        end do
      end do
    end do
    lin = 0
    do l = 1, 2
      do k = 1, 2
        do j = 1, 2
          do i = 1, 2
            lin = lin + 1
            owned(i, j, k, l) = vowned(rank, lin, gen)
          end do
        end do
      end do
    end do
    lr = [0.1_real64, 0.2_real64, 0.3_real64] * gen
    do k = 1, 4
      rng(k) = vrng(rank, k, gen)
    end do
  end subroutine fill

  ! Registers the model; the arrays are the caller's (TARGET, allocated for the saver's life).
  subroutine register(s, w8, w4, i8, owned, lr, rng, lo8, lo4, loi)
    type(ckpt_saver), intent(in) :: s
    real(real64), intent(inout), target :: w8(:, :), lr(:)
    real(real32), intent(inout), target :: w4(:)
    integer(int64), intent(inout), target :: i8(:, :, :), rng(:)
    integer(int32), intent(inout), target :: owned(:, :, :, :)
    integer, intent(in) :: lo8, lo4, loi
    character(len=32) :: oname
    call check(ckpt_saver_add(s, 'w8', w8, global_shape=[NW8, MW8], start=[1, lo8]) == CKPT_OK, &
        'add w8')
    ! integer(8) global_shape and start are accepted as well
    call check(ckpt_saver_add(s, 'w4', w4, global_shape=[int(NW4, int64)], &
        start=[int(lo4, int64)]) == CKPT_OK, 'add w4')
    call check(ckpt_saver_add(s, 'i8', i8, global_shape=[2, 3, MI8], start=[1, 1, loi]) &
        == CKPT_OK, 'add i8')
    write (oname, '(a,i0)') 'owned_', rank
    call check(ckpt_saver_add(s, trim(oname), owned) == CKPT_OK, 'add owned')
    call check(ckpt_saver_add_replicated(s, 'lr', lr) == CKPT_OK, 'add lr')
    call check(ckpt_saver_add_replicated(s, 'rng', rng, per_rank=.true.) == CKPT_OK, 'add rng')
  end subroutine register

  subroutine run_save()
    type(ckpt_saver) :: s
    type(ckpt_manager) :: m
    real(real64), allocatable, target :: w8(:, :), lr(:)
    real(real32), allocatable, target :: w4(:)
    integer(int64), allocatable, target :: i8(:, :, :), rng(:)
    integer(int32), allocatable, target :: owned(:, :, :, :)
    integer :: lo8, n8, lo4, n4, loi, ni, gen
    logical :: restored
    integer :: epoch, step
    character(len=:), allocatable :: saved, latest
    character(len=16) :: want

    call block(MW8, nranks, rank, lo8, n8)
    call block(NW4, nranks, rank, lo4, n4)
    call block(MI8, nranks, rank, loi, ni)
    allocate (w8(NW8, n8), w4(n4), i8(2, 3, ni), owned(2, 2, 2, 2), lr(3), rng(4))
    call check(ckpt_saver_create(s, MPI_COMM_WORLD) == CKPT_OK, 'saver_create')
    call register(s, w8, w4, i8, owned, lr, rng, lo8, lo4, loi)
    call check(ckpt_manager_create(m, s, trim(dir), max_to_keep=3) == CKPT_OK, 'manager_create')
    call check(ckpt_manager_restore_or_initialize(m, restored, epoch, step) == CKPT_OK, &
        'restore_or_initialize (empty)')
    call check(.not. restored .and. epoch == 0 .and. step == 0, 'nothing to restore yet')
    do gen = 1, 2
      call fill(gen, w8, w4, i8, owned, lr, rng, lo8, lo4, loi)
      if (gen == 1) then
        call check(ckpt_manager_save(m, 1, 10, saved=saved) == CKPT_OK, 'save 1')
      else
        call check(ckpt_manager_save(m, 2_int64, 20_int64, end_of_epoch=.true., saved=saved) &
            == CKPT_OK, 'save 2')
      end if
      write (want, '(a,i0)') '/ckpt-', gen
      call check(index(saved, trim(want)) == len(saved) - len_trim(want) + 1, &
          'saved name ' // saved)
    end do
    call check(ckpt_manager_latest(m, latest) == CKPT_OK, 'latest')
    call check(latest == trim(dir) // '/ckpt-2', 'latest is ckpt-2: ' // latest)
    call ckpt_manager_free(m)
    call check(ckpt_saver_close(s) == CKPT_OK, 'saver_close')
  end subroutine run_save

  ! What must fail, each with its message; nothing of it may harm the committed checkpoints.
  subroutine run_errors()
    type(ckpt_saver) :: s
    type(ckpt_manager) :: m
    real(real64), allocatable, target :: x(:), y(:, :)
    integer, allocatable :: empty(:)
    real(real32), allocatable, target :: w8s(:, :)
    real(real32), allocatable, target :: w4(:), w4e(:)
    logical :: restored
    integer(int64) :: epoch, step
    character(len=:), allocatable :: latest
    integer :: lo8, n8, lo4, n4, k

    allocate (x(10), y(4, 6), empty(0))
    x = 1
    y = 2
    call check(ckpt_saver_create(s, MPI_COMM_WORLD) == CKPT_OK, 'saver_create (errors)')
    ! local: wrong shapes and arguments, refused at registration
    call expect(ckpt_saver_add(s, 'bad', x(1:4), global_shape=[3], start=[1]), CKPT_EINVAL, &
        'does not fit', 'a block larger than the global array')
    call expect(ckpt_saver_add(s, 'bad', y, global_shape=[4, 6], start=[1, 0]), CKPT_EINVAL, &
        'start 0 (1-based)', 'a 0-based start')
    call expect(ckpt_saver_add(s, 'bad', y, global_shape=[4, 6]), CKPT_EINVAL, 'give both', &
        'global_shape without start')
    call expect(ckpt_saver_add(s, 'bad', y, global_shape=[24], start=[1]), CKPT_EINVAL, &
        'rank 2', 'global_shape of the wrong rank')
    ! (a zero-size variable: gfortran 12 passes the constructor [integer ::] to an optional
    ! class(*) argument as absent, so that call registers the whole array)
    call expect(ckpt_saver_add(s, 'bad', y, global_shape=empty, start=empty), CKPT_EINVAL, &
        'one entry per dimension', 'an empty global_shape')
    call expect(ckpt_saver_add(s, 'bad', y, global_shape=[4.0, 6.0], start=[1.0, 1.0]), &
        CKPT_EINVAL, 'integer arrays', 'a real global_shape')
    call expect(ckpt_saver_add(s, 'bad', x(1:10:2)), CKPT_EINVAL, 'not contiguous in dimension 1', &
        'a strided section')
    call expect(ckpt_saver_add(s, 'bad', y(1:3, :)), CKPT_EINVAL, &
        'not contiguous in dimension 2', 'a section of rows')
    call check(ckpt_saver_add(s, 'x', x) == CKPT_OK, 'add x')
    call expect(ckpt_saver_add(s, 'x', x), CKPT_EINVAL, 'already registered', 'a name twice')
    call check(ckpt_saver_close(s) == CKPT_OK, 'saver_close (errors)')
    call expect(ckpt_saver_add(s, 'x', x), CKPT_EINVAL, 'not created', 'a closed saver')

    ! collective: a registration that disagrees with the checkpoint is an error on every rank,
    ! not a reason to fall back to an older checkpoint or to start afresh
    call block(MW8, nranks, rank, lo8, n8)
    allocate (w8s(NW8, n8))
    call check(ckpt_saver_create(s, MPI_COMM_WORLD) == CKPT_OK, 'saver_create (dtype)')
    call check(ckpt_saver_add(s, 'w8', w8s, global_shape=[NW8, MW8], start=[1, lo8]) == CKPT_OK, &
        'add w8 as real(4)')
    call check(ckpt_manager_create(m, s, trim(dir)) == CKPT_OK, 'manager_create (dtype)')
    call expect(ckpt_manager_restore_or_initialize(m, restored, epoch, step), CKPT_EMISMATCH, &
        'w8', 'w8 registered as real(4)')
    call check(.not. restored, 'not restored after a dtype mismatch')
    call ckpt_manager_free(m)
    call ckpt_saver_free(s)

    call block(NW4 + 1, nranks, rank, lo4, n4)
    allocate (w4(n4))
    call check(ckpt_saver_create(s, MPI_COMM_WORLD) == CKPT_OK, 'saver_create (shape)')
    call check(ckpt_saver_add(s, 'w4', w4, global_shape=[NW4 + 1], start=[lo4]) == CKPT_OK, &
        'add w4 of 11')
    call check(ckpt_manager_create(m, s, trim(dir)) == CKPT_OK, 'manager_create (shape)')
    call expect(ckpt_manager_restore_or_initialize(m, restored, epoch, step), CKPT_EMISMATCH, &
        'w4', 'w4 registered with 11 elements')
    call check(ckpt_manager_latest(m, latest) == CKPT_OK, 'latest (shape)')
    call check(latest == trim(dir) // '/ckpt-2', 'ckpt-2 is still the latest: ' // latest)
    call ckpt_manager_free(m)
    call ckpt_saver_free(s)

    ! strict=.true.: only w4 registered, the checkpoint's other tensors are unexpected: an error
    ! naming them on every rank, nothing restored; without strict the same restore reads w4
    deallocate (w4)
    call block(NW4, nranks, rank, lo4, n4)
    allocate (w4(n4), w4e(n4))
    do k = 1, n4
      w4e(k) = vw4(lo4 + k - 1, 2)
    end do
    w4 = -1
    call check(ckpt_saver_create(s, MPI_COMM_WORLD) == CKPT_OK, 'saver_create (strict)')
    call check(ckpt_saver_add(s, 'w4', w4, global_shape=[NW4], start=[lo4]) == CKPT_OK, &
        'add w4 alone')
    call check(ckpt_manager_create(m, s, trim(dir), strict=.true.) == CKPT_OK, &
        'manager_create (strict)')
    call expect(ckpt_manager_restore_or_initialize(m, restored, epoch, step), CKPT_EMISMATCH, &
        'unexpected (in the checkpoint, registered by no rank): ', 'strict: w4 alone')
    call check(.not. restored .and. all(w4 == -1), 'a strict restore restored nothing')
    call ckpt_manager_free(m)
    call check(ckpt_manager_create(m, s, trim(dir)) == CKPT_OK, 'manager_create (not strict)')
    call check(ckpt_manager_restore_or_initialize(m, restored, epoch, step) == CKPT_OK, &
        'not strict: w4 alone restores')
    call check(restored .and. step == 20 .and. all(w4 == w4e), 'not strict: w4 of ckpt-2')
    call ckpt_manager_free(m)
    call ckpt_saver_free(s)
    call check(ckpt_strerror(CKPT_EMISMATCH) /= '' .and. ckpt_strerror(CKPT_OK) /= &
        ckpt_strerror(CKPT_EMISMATCH), 'strerror')
  end subroutine run_errors

  ! ckpt_error_reason(): a restore that stops at a pinned checkpoint it cannot read is
  ! CKPT_ENOTFOUND with CKPT_REASON_PINNED on every rank; an error that is not "not found" has
  ! none. Two saves in DIR/reason, then `pin ckpt-1 1 2` (ckpt-2 set aside) and ckpt-1's index gone.
  subroutine run_reason()
    type(ckpt_saver) :: s
    type(ckpt_manager) :: m
    real(real64), allocatable, target :: x(:)
    logical :: restored
    integer :: epoch, step, u
    character(len=:), allocatable :: rdir
    character(len=32) :: name

    rdir = trim(dir) // '/reason'
    if (rank == 0) call execute_command_line('rm -rf ''' // rdir // '''')
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    allocate (x(4))
    x = rank
    write (name, '(a,i0)') 'x_', rank
    call check(ckpt_saver_create(s, MPI_COMM_WORLD) == CKPT_OK, 'saver_create (reason)')
    call check(ckpt_saver_add(s, trim(name), x) == CKPT_OK, 'add x (reason)')
    call check(ckpt_manager_create(m, s, rdir) == CKPT_OK, 'manager_create (reason)')
    call check(ckpt_manager_save(m, 1, 1) == CKPT_OK, 'save 1 (reason)')
    call check(ckpt_manager_save(m, 1, 2) == CKPT_OK, 'save 2 (reason)')
    call check(ckpt_error_reason() == CKPT_REASON_NONE, 'no reason after a success')
    call ckpt_manager_free(m)
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    if (rank == 0) then
      open (newunit=u, file=rdir // '/restart', status='replace', action='write')
      write (u, '(a)') 'pin ckpt-1 1 2'
      close (u)
      open (newunit=u, file=rdir // '/ckpt-1.index', status='old')
      close (u, status='delete')
    end if
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    call check(ckpt_manager_create(m, s, rdir) == CKPT_OK, 'manager_create (pinned)')
    call expect(ckpt_manager_restore_or_initialize(m, restored, epoch, step), CKPT_ENOTFOUND, &
        'pinned', 'the pinned checkpoint without its index')
    call check(ckpt_error_reason() == CKPT_REASON_PINNED, 'reason pinned')
    call check(.not. restored, 'nothing restored past the pin')
    ! an error of another code has no reason
    call expect(ckpt_saver_add(s, 'bad', x, global_shape=[3], start=[1]), CKPT_EINVAL, &
        'does not fit', 'a block larger than the global array (reason)')
    call check(ckpt_error_reason() == CKPT_REASON_NONE, 'no reason for CKPT_EINVAL')
    call check(ckpt_error_errno() == 0, 'no errno for CKPT_EINVAL')
    call ckpt_manager_free(m)
    call check(ckpt_saver_close(s) == CKPT_OK, 'saver_close (reason)')
  end subroutine run_reason

  subroutine run_restore()
    type(ckpt_saver) :: s
    type(ckpt_manager) :: m
    real(real64), allocatable, target :: w8(:, :), lr(:), w8e(:, :), lre(:)
    real(real32), allocatable, target :: w4(:), w4e(:)
    integer(int64), allocatable, target :: i8(:, :, :), rng(:), i8e(:, :, :), rnge(:)
    integer(int32), allocatable, target :: owned(:, :, :, :), ownede(:, :, :, :)
    integer :: lo8, n8, lo4, n4, loi, ni
    logical :: restored
    integer :: epoch, step
    character(len=:), allocatable :: path

    call block(MW8, nranks, rank, lo8, n8)
    call block(NW4, nranks, rank, lo4, n4)
    call block(MI8, nranks, rank, loi, ni)
    allocate (w8(NW8, n8), w4(n4), i8(2, 3, ni), owned(2, 2, 2, 2), lr(3), rng(4))
    allocate (w8e(NW8, n8), w4e(n4), i8e(2, 3, ni), ownede(2, 2, 2, 2), lre(3), rnge(4))
    ! what ckpt-2 holds for this rank's new blocks, and garbage in the registered arrays
    call fill(2, w8e, w4e, i8e, ownede, lre, rnge, lo8, lo4, loi)
    w8 = -1
    w4 = -1
    i8 = -1
    owned = -1
    lr = -1
    rng = -1
    call check(ckpt_saver_create(s, MPI_COMM_WORLD, async=.true.) == CKPT_OK, 'saver_create')
    call register(s, w8, w4, i8, owned, lr, rng, lo8, lo4, loi)
    call check(ckpt_manager_create(m, s, trim(dir), max_to_keep=3) == CKPT_OK, 'manager_create')
    call check(ckpt_manager_restore_or_initialize(m, restored, epoch, step, path) == CKPT_OK, &
        'restore_or_initialize')
    call check(restored .and. epoch == 2 .and. step == 20, 'restored epoch 2, step 20')
    call check(path == trim(dir) // '/ckpt-2', 'restored ckpt-2: ' // path)
    call check(all(w8 == w8e), 'w8 values')
    call check(all(w4 == w4e), 'w4 values')
    call check(all(i8 == i8e), 'i8 values')
    call check(all(owned == ownede), 'owned values')
    call check(all(lr == lre), 'lr values')
    call check(all(rng == rnge), 'rng values (this rank''s own)')
    ! an async save after the restore numbers past ckpt-2 and commits at sync
    call check(ckpt_manager_save(m, 3, 30, force=.true., saved=path) == CKPT_OK, 'save 3')
    call check(ckpt_saver_sync(s) == CKPT_OK, 'sync')
    call check(path == trim(dir) // '/ckpt-3', 'saved ckpt-3: ' // path)
    call ckpt_manager_free(m)
    call check(ckpt_saver_close(s) == CKPT_OK, 'saver_close')
  end subroutine run_restore

end program test_fortran
