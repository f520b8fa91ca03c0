! A Fortran program built against the installed mpickpt module (tests/scripts/install_consumer.sh):
! every rank saves its block of a global array through a manager, then a second saver restores it
! into another array; every value is checked on every rank.
!   mpirun -np N consumer_fortran DIR
program consumer_fortran
  use mpi
  use mpickpt
  implicit none
  integer, parameter :: N = 4
  type(ckpt_saver) :: s
  type(ckpt_manager) :: m
  real(8), allocatable, target :: mine(:, :), back(:, :)
  character(len=4096) :: dir
  integer :: ierr, rc, rank, nranks, bad, total, i, j, epoch, step, pass
  logical :: restored

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, dir)
  allocate (mine(3, N), back(3, N))
  do j = 1, N
    do i = 1, 3
      mine(i, j) = rank * 100 + 10 * j + i + 0.5d0
    end do
  end do
  back = -1
  bad = 0
  do pass = 1, 2
    if (pass == 1) then
      rc = ckpt_saver_create(s, MPI_COMM_WORLD)
      if (rc == CKPT_OK) rc = ckpt_saver_add(s, 'w', mine, global_shape=[3, N * nranks], &
          start=[1, rank * N + 1])
    else
      rc = ckpt_saver_create(s, MPI_COMM_WORLD)
      if (rc == CKPT_OK) rc = ckpt_saver_add(s, 'w', back, global_shape=[3, N * nranks], &
          start=[1, rank * N + 1])
    end if
    if (rc == CKPT_OK) rc = ckpt_manager_create(m, s, trim(dir))
    if (rc == CKPT_OK .and. pass == 1) then
      rc = ckpt_manager_save(m, 1, 7)
    else if (rc == CKPT_OK) then
      rc = ckpt_manager_restore_or_initialize(m, restored, epoch, step)
      if (rc == CKPT_OK .and. .not. (restored .and. epoch == 1 .and. step == 7 .and. &
          all(back == mine))) bad = bad + 1
    end if
    if (rc /= CKPT_OK) then
      print '(a,i0,a,a)', 'rank ', rank, ': FAIL: ', ckpt_error_message()
      bad = bad + 1
    end if
    call ckpt_manager_free(m)
    call ckpt_saver_free(s)
  end do
  call MPI_Allreduce(bad, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (total == 0) then
      print '(a,i0,a)', 'consumer_fortran: saved and restored on ', nranks, ' ranks: ok'
    else
      print '(a)', 'consumer_fortran: FAILED'
    end if
  end if
  deallocate (mine, back) ! a main program's allocatables outlive it: LeakSanitizer would report them
  call MPI_Finalize(ierr)
  if (total /= 0) error stop 1
end program consumer_fortran
